"""`ArgumentParser` for the argparse entry points wrapped by `@cli` (ouroboros.backends.base): a bad flag raises
OuroborosError, so it prints as one `error: <message>` line and exits 2, like every other bad input (argparse's
own error prints the usage block first)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from ouroboros.backends.base import OuroborosError


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OuroborosError(f"{message} (see {self.prog} --help)")
