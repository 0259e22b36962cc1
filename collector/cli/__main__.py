import sys

from budgetlens.cli import main

sys.exit(main())
