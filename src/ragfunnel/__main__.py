from ragfunnel.cli.main import main

main()
