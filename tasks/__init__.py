"""Task registry: one declarative YAML file per task (installed as ``bench.registry.tasks``)."""
