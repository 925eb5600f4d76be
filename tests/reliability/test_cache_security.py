"""Hostile kernel caches: xsim never loads code from a folder or an entry someone else could have
written (another owner, group/world-writable, a symlink into such a place), says what is wrong and
how to fix it, and removes only the build folders of killed compiles. "Another user" is uid 65534
(nobody): the suite runs as root, which may chown; as another user those cases are skipped."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from xsim.kernels import cache
from xsim.kernels.cache import CacheSecurityError

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a file to another user")
pytestmark = pytest.mark.cpu_only("no kernels run on a device")


@pytest.fixture
def use_dir(monkeypatch):
    def use(path):
        monkeypatch.setenv("XSIM_CACHE_DIR", str(path))
        return path
    return use


def private(path):
    path.mkdir(mode=0o700, parents=True)
    os.chmod(path, 0o700)
    return path


# -- the folder -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o707, 0o720, 0o702, 0o1777])
def test_a_folder_others_can_write_is_refused_with_the_chmod_fix(tmp_path, use_dir, mode):
    d = private(tmp_path / "c")
    os.chmod(d, mode)
    use_dir(d)
    with pytest.raises(CacheSecurityError) as info:
        cache.cache_dir()
    msg = str(info.value)
    assert f"the kernel cache folder {d} is writable by other users (mode {mode & 0o7777:o})" in msg
    assert f"chmod 700 {d}" in msg


@as_root
@pytest.mark.parametrize("mode", [0o700, 0o755])
def test_a_folder_owned_by_another_user_is_refused(tmp_path, use_dir, mode):
    d = private(tmp_path / "c")
    os.chmod(d, mode)
    os.chown(d, NOBODY, NOBODY)
    use_dir(d)
    with pytest.raises(CacheSecurityError, match=f"belongs to user id {NOBODY}, not you .*XSIM_CACHE_DIR"):
        cache.cache_dir()


def test_a_symlink_to_a_world_writable_folder_names_both(tmp_path, use_dir):
    target = private(tmp_path / "shared")
    os.chmod(target, 0o777)
    link = tmp_path / "link"
    link.symlink_to(target)
    use_dir(link)
    with pytest.raises(CacheSecurityError) as info:
        cache.cache_dir()
    assert f"{target} (reached through the symlink {link}) is writable by other users" in str(info.value)


def test_a_private_folder_inside_a_world_writable_folder_is_refused(tmp_path, use_dir):
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)  # no sticky bit: anyone may rename our folder and put theirs in its place
    d = private(open_parent / "c")
    link = tmp_path / "link"
    link.symlink_to(d)
    use_dir(link)
    with pytest.raises(CacheSecurityError) as info:
        cache.cache_dir()
    assert f"lies in {open_parent}, which other users can change" in str(info.value)
    assert "(reached through the symlink" in str(info.value)


@as_root
def test_a_folder_inside_another_users_folder_is_refused(tmp_path, use_dir):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    d = private(theirs / "c")
    os.chown(theirs, NOBODY, NOBODY)
    use_dir(d)
    with pytest.raises(CacheSecurityError, match=f"lies in {theirs}, which other users can change .owner id {NOBODY}"):
        cache.cache_dir()


@as_root
def test_a_symlink_to_another_users_folder_is_refused(tmp_path, use_dir):
    d = private(tmp_path / "theirs")
    os.chown(d, NOBODY, NOBODY)
    link = tmp_path / "link"
    link.symlink_to(d)
    use_dir(link)
    with pytest.raises(CacheSecurityError, match="reached through the symlink .* belongs to user id 65534"):
        cache.cache_dir()


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755, 0o500])
def test_a_folder_only_the_user_can_write_is_used(tmp_path, use_dir, mode):
    d = private(tmp_path / "c")
    os.chmod(d, mode)
    use_dir(d)
    assert cache.cache_dir() == d


def test_a_folder_in_a_sticky_world_writable_folder_is_used(tmp_path, use_dir):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp: others cannot rename or delete what is ours
    d = use_dir(sticky / "c")
    assert cache.cache_dir() == d
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_a_new_folder_is_private_whatever_the_umask(tmp_path, use_dir):
    d = use_dir(tmp_path / "a" / "b")
    old = os.umask(0)
    try:
        assert cache.cache_dir() == d
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


# -- the entries ----------------------------------------------------------------------------------


@pytest.fixture
def entry(tmp_path, use_dir):
    """A valid cache entry (metadata + binary) in a private folder: (binary path, metadata path)."""
    d = use_dir(private(tmp_path / "c"))
    binary = d / "mod-key.so"
    binary.write_bytes(b"\x7fELF not really")
    os.chmod(binary, 0o700)
    meta = d / "mod-key.json"
    meta.write_text(json.dumps({"kernels": {}, "digest": cache.file_digest(binary)}))
    os.chmod(meta, 0o600)
    return binary, meta


def test_a_valid_entry_is_found(entry):
    binary, _ = entry
    assert cache.lookup("mod-key", ".so") == (binary, {"kernels": {}, "digest": cache.file_digest(binary)})


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664, 0o622, 0o777])
def test_an_entry_others_can_write_is_refused_naming_it(entry, which, mode):
    path = entry[which]
    os.chmod(path, mode)
    with pytest.raises(CacheSecurityError) as info:
        cache.lookup("mod-key", ".so")
    msg = str(info.value)
    assert f"the kernel cache entry {path} is a plain file owned by user id {os.geteuid()} with mode {mode:o}" in msg
    assert f"rm {path}" in msg


@as_root
@pytest.mark.parametrize("which", [0, 1])
def test_an_entry_owned_by_another_user_is_refused(entry, which):
    path = entry[which]
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(CacheSecurityError, match=f"owned by user id {NOBODY} with mode"):
        cache.lookup("mod-key", ".so")


@pytest.mark.parametrize("which", [0, 1])
def test_an_entry_that_is_a_symlink_is_refused(entry, tmp_path, which):
    path = entry[which]
    elsewhere = tmp_path / "planted"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(elsewhere)
    with pytest.raises(CacheSecurityError, match=f"entry {path} is not a plain file"):
        cache.lookup("mod-key", ".so")


def test_a_missing_or_tampered_entry_is_rebuilt_not_refused(entry):
    binary, meta = entry
    binary.write_bytes(b"changed")  # the digest no longer matches
    assert cache.lookup("mod-key", ".so") is None
    binary.unlink()
    assert cache.lookup("mod-key", ".so") is None


def test_store_writes_entries_the_loader_accepts_even_with_a_permissive_umask(tmp_path, use_dir):
    use_dir(private(tmp_path / "c"))
    built = tmp_path / "module.so"
    old = os.umask(0)
    try:
        built.write_bytes(b"binary")
        os.chmod(built, 0o777)  # what a compiler leaves under umask 0
        path = cache.store("k", ".so", built, {"kernels": {}})
    finally:
        os.umask(old)
    assert not stat.S_IMODE(path.stat().st_mode) & 0o022
    assert cache.lookup("k", ".so")[0] == path


def test_a_process_refuses_to_load_from_a_world_writable_cache(tmp_path):
    d = private(tmp_path / "c")
    os.chmod(d, 0o777)
    code = ("import xsim\n@xsim.kernel(module='reliability_cache_probe')\ndef k(x: xsim.array(dtype=float)):\n"
            "    x[xsim.tid()] = 1.0\nxsim.launch(k, 1, outputs=[xsim.zeros(1)])\n")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, XSIM_CACHE_DIR=str(d)),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert f"CacheSecurityError: the kernel cache folder {d} is writable by other users" in proc.stderr
    assert list(d.iterdir()) == []  # nothing compiled into it either


# -- build folders of killed compiles -----------------------------------------------------------------


def age(path, seconds):
    t = time.time() - seconds
    for p in [path, *(path.iterdir() if path.is_dir() else [])]:
        os.utime(p, (t, t), follow_symlinks=False)


@pytest.fixture
def leftovers(tmp_path, use_dir):
    d = use_dir(private(tmp_path / "c"))
    made = {}
    for name, seconds, is_dir in [("build-killed", 7200, True), ("build-running", 10, True),
                                  ("build-old-but-writing", 7200, True), ("x.json.abc.tmp", 7200, False),
                                  ("y.json.def.tmp", 5, False), ("old-entry.so", 7200, False)]:
        p = d / name
        if is_dir:
            p.mkdir()
            (p / "module.cpp").write_text("// source")
        else:
            p.write_text("data")
        age(p, seconds)
        made[name] = p
    os.utime(made["build-old-but-writing"] / "module.cpp")  # a compile in progress just wrote here
    return made


def test_stale_build_folders_and_temporary_files_are_removed(leftovers):
    removed = {p.name for p in cache.remove_stale_builds()}
    assert removed == {"build-killed", "x.json.abc.tmp"}
    assert not leftovers["build-killed"].exists() and not leftovers["x.json.abc.tmp"].exists()


@pytest.mark.parametrize("name", ["build-running", "build-old-but-writing", "y.json.def.tmp", "old-entry.so"])
def test_builds_in_progress_and_entries_are_kept(leftovers, name):
    cache.remove_stale_builds()
    assert leftovers[name].exists()


@as_root
def test_another_users_stale_build_folder_is_left_alone(leftovers):
    p = leftovers["build-killed"]
    os.chown(p, NOBODY, NOBODY)
    cache.remove_stale_builds()
    assert p.exists()
