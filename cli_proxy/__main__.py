import sys

from cli_proxy.commands.main import main

sys.exit(main())
