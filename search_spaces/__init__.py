"""Search spaces as data: one TOML file per space, selected with ``--space NAME``."""
