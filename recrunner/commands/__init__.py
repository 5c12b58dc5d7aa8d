"""One module per `recrun` subcommand: `run(cfg, args)`, optional `add_arguments` and `KEYS`."""
