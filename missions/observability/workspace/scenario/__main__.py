from scenario.run import main

raise SystemExit(main())
