"""Model-pair registry: one YAML file per draft/target pair (installed as ``bench.registry.pairs``)."""
