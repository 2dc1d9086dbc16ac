"""Memory per open connection to the API server: the operator holds one per watched kind, hundreds for a release.

Each case runs in a process of its own (the read-buffer size is process-wide) that opens 100 watches through the
operator's client, waits until each has delivered its first event (so its connection is open), and reports how
much its resident memory grew per watch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.cluster

WATCHES = 100

PROBE = textwrap.dedent('''
    import asyncio, json, sys
    from kfdef_operator.runtime.memory import limit_tls_read_buffers
    from kfdef_operator.ssa.client import KubeClient

    def rss_kib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    async def main(kubeconfig: str, limited: bool, count: int) -> None:
        if limited:
            limit_tls_read_buffers()
        client = await KubeClient.connect(kubeconfig)
        await client.request("GET", "/api/v1/namespaces")  # the pool, TLS and the client's code warmed up
        before = rss_kib()
        opened = 0
        all_open = asyncio.Event()

        async def watch() -> None:
            nonlocal opened
            async for _ in client.watch("/api/v1/namespaces", timeout_seconds=120):
                opened += 1
                if opened == count:
                    all_open.set()
                await asyncio.Event().wait()  # keep the connection open

        tasks = [asyncio.create_task(watch()) for _ in range(count)]
        await asyncio.wait_for(all_open.wait(), 60)
        grown = rss_kib() - before
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
        print(json.dumps({"kib_per_watch": grown / count}))

    asyncio.run(main(sys.argv[1], sys.argv[2] == "limited", int(sys.argv[3])))
''')


def kib_per_watch(kubeconfig: str, limited: bool) -> float:
    done = subprocess.run([sys.executable, "-c", PROBE, kubeconfig, "limited" if limited else "default",
                           str(WATCHES)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(json.loads(done.stdout.splitlines()[-1])["kib_per_watch"])


def test_an_open_watch_holds_a_small_read_buffer(control_plane):
    default = kib_per_watch(str(control_plane.kubeconfig), limited=False)
    limited = kib_per_watch(str(control_plane.kubeconfig), limited=True)
    # asyncio's own buffer is 256 KiB per TLS connection, zeroed and so resident; the operator's is 16 KiB.
    assert default > 200, f"{default:.0f} KiB per watch without the limit: the probe no longer measures the buffer"
    assert limited < default - 150, f"{limited:.0f} KiB per watch with the limit, {default:.0f} KiB without"
