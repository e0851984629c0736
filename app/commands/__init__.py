"""app.commands: one module per `quota-streams` subcommand, each with `register(subparsers)` and
`run(args)`, thin over the packages they drive; `support` holds what several of them share.

The top of the import graph: a command may import any package, and only `app.cli` imports the
commands (the client programs' own command line shares `support`'s argparse types).
"""
