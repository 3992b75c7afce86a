from sparkpoint.cli.main import run

run()
