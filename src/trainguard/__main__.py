from trainguard.cli import console_main

console_main()
