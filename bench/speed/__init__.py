"""``speed --drafter lookup``: prompt lookup timed against ``ar`` and transformers' prompt lookup
(``measure``), what each method's outputs are worth beside its speed (``fidelity``), and the table
and speed-against-fidelity plot (``report``)."""
