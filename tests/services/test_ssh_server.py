"""hvdcourse.course.services.ssh_server: what it needs and what it hands to ssh. Its real launch
(horovodrun -hostfile -p over sshd) runs in the Slurm lesson, whose hidden cell asserts it."""

import pytest

from hvdcourse.course.services import ssh_server
from hvdcourse.runtime.errors import MissingToolError, error_line


def test_a_missing_sshd_says_which_package_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ssh_server, "SBIN", (str(tmp_path),))
    with pytest.raises(MissingToolError) as err:
        ssh_server.SshServer()
    line = error_line(err.value)
    assert (
        "\n" not in line
        and "'sshd' is not installed" in line
        and "apt-get install openssh-server" in line
    )


def test_the_client_sends_the_hostfiles_names_to_127_0_0_1_with_its_own_key_and_known_hosts(
    tmp_path,
):
    server = ssh_server.SshServer(hosts=["node1", "node2"])
    server.folder = str(tmp_path)
    config = server.ssh_config()
    assert "Host node1 node2\n  HostName 127.0.0.1" in config
    assert f"IdentityFile {tmp_path}/id_ed25519" in config
    assert f"UserKnownHostsFile {tmp_path}/known_hosts" in config
    assert server.write_hostfile(str(tmp_path), slots=2).endswith("HOSTLIST")
    assert (tmp_path / "HOSTLIST").read_text() == "node1 slots=2\nnode2 slots=2\n"
