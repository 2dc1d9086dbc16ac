"""free_port: ports for the control plane's listeners stay out of the kernel's ephemeral range.

CI once lost a whole test module because kube-controller-manager's port, picked
with bind(0), was taken by an outgoing connection before the component bound it.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kfdef_dev import controlplane
from kfdef_dev.controlplane import ControlPlaneError, ephemeral_port_range, free_port


def test_ports_are_never_in_the_ephemeral_range() -> None:
    low, high = ephemeral_port_range()
    ports = [free_port() for _ in range(300)]
    assert all(1024 <= p < low or high < p <= 65535 for p in ports), sorted(p for p in ports if low <= p <= high)


def test_ports_spread_over_the_range_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("1024\t65400\n")
    monkeypatch.setattr(controlplane, "_EPHEMERAL_RANGE_FILE", range_file)
    ports = {free_port() for _ in range(50)}
    assert all(65401 <= p <= 65535 for p in ports)
    assert len(ports) > 10  # random, so parallel control planes rarely pick the same


def test_a_port_in_use_is_never_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("1025 65535")  # leaves exactly one candidate: 1024
    monkeypatch.setattr(controlplane, "_EPHEMERAL_RANGE_FILE", range_file)
    assert free_port() == 1024
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 1024))
        listener.listen()
        with pytest.raises(ControlPlaneError, match="no free port"):
            free_port()


def test_an_unreadable_range_falls_back_to_the_linux_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controlplane, "_EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert ephemeral_port_range() == (32768, 60999)
