from pgworkerd.cli import main

main()
