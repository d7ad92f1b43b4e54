"""Reports: results -> summaries (``summary``) -> Table 1 (``table``) and figures (``plots``)."""
