from pgworkerd.cli.main import main

main()
