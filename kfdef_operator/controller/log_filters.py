"""Log records re-levelled to say how much they matter to the person reading the operator's log."""

from __future__ import annotations

import logging


class RetriedThrottling(logging.Filter):
    """kopf logs every request the API server answered with 429 as an ERROR, although it retries it.

    A 429 means the server did not process the request and asks for a retry: right after the KfDef CRD is
    installed or changed, the server answers "storage is (re)initializing" until its watch cache for KfDefs
    is ready. Those records become INFO; a 429 kopf gives up on ("escalating") stays an ERROR.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.levelno == logging.ERROR and record.name.startswith("kopf")
                and "will retry" in (message := record.getMessage()) and "APITooManyRequestsError" in message):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True
