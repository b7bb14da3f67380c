from numerator.cli import main

main()
