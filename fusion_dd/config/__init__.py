"""The search's settings: ``fusion-dd.yaml`` read, checked and turned into typed settings
(``settings``), and what one session adds to them on the command line (``session``)."""
