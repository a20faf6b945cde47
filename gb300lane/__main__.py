from gb300lane.cli.main import main

main()
