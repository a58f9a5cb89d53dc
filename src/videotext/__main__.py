from videotext.cli import main

main()
