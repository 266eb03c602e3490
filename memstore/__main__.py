from memstore.cli import main

main()
