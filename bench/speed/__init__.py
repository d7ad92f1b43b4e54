"""The ``speed`` command's measurements, one module a job: the timed runs they share (``runs``),
step timing against transformers and the ideal bound (``steps``), prompt lookup against ``ar`` and
transformers' lookup (``lookup``) with what its outputs are worth (``fidelity``), batched
throughput (``throughput``), and the pages, plots and the one writer of their files (``report``)."""
