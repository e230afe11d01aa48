from flagstaff.cli.main import main

raise SystemExit(main())
