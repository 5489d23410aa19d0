"""What a user reads: ``report.json`` and the summary (``build``), localization of each culprit
in words (``localize``), and the HTML page with its charts (``html``, ``svg``)."""
