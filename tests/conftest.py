import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pg_fixture import postgres_url  # noqa: E402,F401  (a real PostgreSQL server, for distributed-search tests)


@pytest.fixture
def data_dir() -> Path:
    return DATA
