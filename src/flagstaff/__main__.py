from flagstaff.cli import main

raise SystemExit(main())
