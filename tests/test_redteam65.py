"""Red-team round 65: entries of farm.yaml's node registry the farm has not seen before:
node names the farm turns into one report page, and hosts written as ssh_config would."""

from __future__ import annotations

from pathlib import Path

import pytest

FARM_YAML = """\
database: sqlite:///results.db
nodes:
{nodes}
"""


@pytest.mark.parametrize(
    ("nodes", "first", "second"),
    [
        # node h200's toolchain column `h200+cuda-13` and a node named h200_cuda-13: both nodes/h200_cuda-13.html
        (
            "  h200:\n    host: a.example.org\n    toolchains: {cuda-13: /usr/local/cuda/bin/nvcc}\n"
            "  h200_cuda-13:\n    host: b.example.org\n",
            "h200+cuda-13",
            "h200_cuda-13",
        ),
        # T4.html and t4.html: one file on a case-insensitive disk (macOS, a Windows share)
        ("  T4:\n    host: a.example.org\n  t4:\n    host: b.example.org\n", "T4", "t4"),
    ],
)
def test_node_names_that_share_a_page_are_refused(tmp_path: Path, nodes: str, first: str, second: str) -> None:
    """Two columns whose report pages are one file: the later page overwrote the earlier, and
    both columns' heads linked to it, the reviewers shown one node's probe under the other's
    name. farm.yaml is now refused, naming the node, its page and the name it shares it with."""
    from orchestrator.config.farm import load_farm
    from orchestrator.errors import ConfigError

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "k.yaml").write_text(
        "kernel: k\nsources: [kernels/k.cu]\npass_marker: PASS\nrefusal_marker: needs CC\nvariants:\n"
        "  v1:\n    build: '{nvcc} -o {binary} {sources}'\n    cc: {min: '7.5'}\n"
    )
    path = tmp_path / "farm.yaml"
    path.write_text(FARM_YAML.format(nodes=nodes.rstrip("\n")))
    with pytest.raises(ConfigError) as info:
        load_farm(path)
    text = str(info.value)
    assert f"farm.yaml: nodes.{second.split('+')[0]}" in text, text
    assert f"{first!r}" in text and f"{second!r}" in text and ".html" in text, text


def _load_with_host(tmp_path: Path, host: str) -> str:
    """farm.yaml with one ssh node at `host`: the load's error text, or "" where it loads."""
    import yaml

    from orchestrator.config.farm import load_farm
    from orchestrator.errors import ConfigError

    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "k.cu").write_text("int main() { return 0; }\n")
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "k.yaml").write_text(
        "kernel: k\nsources: [kernels/k.cu]\npass_marker: PASS\nrefusal_marker: needs CC\nvariants:\n"
        "  v1:\n    build: '{nvcc} -o {binary} {sources}'\n    cc: {min: '7.5'}\n"
    )
    path = tmp_path / "farm.yaml"
    path.write_text(yaml.safe_dump({"nodes": {"gpu1": {"host": host, "port": 2222}}}))
    try:
        load_farm(path)
    except ConfigError as err:
        return str(err)
    return ""


@pytest.mark.parametrize(
    "host",
    ["h200.example.org:2222", "farm@h200.example.org", "ssh://h200.example.org", "[::1]", "h200 ", "h200\tb"],
)
def test_a_host_that_is_no_host_name_is_refused_at_load(tmp_path: Path, host: str) -> None:
    """`host` took any text: a port, a login or a URL written into it (ssh_config's habits), or
    brackets around an IPv6 address, loaded, and every cell of the node was infra-error "could
    not resolve" run after run. The load now names the key and what belongs there."""
    text = _load_with_host(tmp_path, host)
    assert "farm.yaml: nodes.gpu1.host" in text and "port" in text and "user" in text, text


@pytest.mark.parametrize("host", ["h200.example.org", "h200.example.org.", "::1", "127.0.0.1", "GPU-Node_1", "fe80::1"])
def test_host_names_and_addresses_still_load(tmp_path: Path, host: str) -> None:
    assert _load_with_host(tmp_path, host) == ""
