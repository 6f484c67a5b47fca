from lorafleet.cli.entry import main

main()
