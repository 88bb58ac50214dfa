from preflight.cli.main import main

main()
