"""Reliability, output paths: ``xsim run`` checks ``--out`` and ``--preview`` (and the scene's
``[output]`` paths) before simulating, refuses any that would overwrite the input scene, write
into a directory or a non-USD/non-PNG file, and writes both files atomically; nothing the user had
is lost, and a write error names the real target, never the temporary file."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xsim.cli import main
from xsim.io import ClothPart, UsdWriter, save_preview, write_usd

SCENE = ("[sim]\nframes = 1\nsubsteps = 1\niterations = 1\n"
         "[[cloth]]\ngrid = { dim = [1, 1], cell = [0.1, 0.1] }\nposition = [0.0, 0.0, 1.0]\n")


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory holding scene.toml, an old USD file and an old preview; yields it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scene.toml").write_text(SCENE)
    (tmp_path / "old.usda").write_text("previous usd\n")
    (tmp_path / "old.png").write_bytes(b"previous png")
    return tmp_path


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (relative path -> bytes, or its link target); folders as None."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = ("link", os.readlink(p)) if p.is_symlink() else None if p.is_dir() else p.read_bytes()
    return out


def _scene_as_usda(work):
    (work / "scene.usda").write_text(SCENE)
    return ["scene.usda", "--out", "scene.usda"]


def _link_to_scene(work, name):
    (work / name).symlink_to(work / "scene.toml")
    return name


def _dir(work, name):
    (work / name).mkdir()
    return name


def _file_as_folder(work):
    (work / "notafolder").write_text("a file\n")
    return "notafolder/x.usda"


# (extra arguments after `run`, given the working dir; fragment of the message)
REFUSED = {
    "--out the input scene": (lambda w: ["scene.toml", "--out", "scene.toml"], "--out: expected a file path ending"),
    "--out the input scene by another path": (lambda w: ["scene.toml", "--out", "./sub/../scene.toml"],
                                              "--out: expected"),
    "--out a .usda scene file itself": (_scene_as_usda, "--out: expected a path other than the input file"),
    "--out a link to the scene": (lambda w: ["scene.toml", "--out", _link_to_scene(w, "link.usda")],
                                  "writing it would destroy the input"),
    "--out empty": (lambda w: ["scene.toml", "--out", ""], "found an empty path"),
    "--out text file": (lambda w: ["scene.toml", "--out", "result.txt"], '.usda, .usdc, .usd, found "result.txt"'),
    "--out no suffix": (lambda w: ["scene.toml", "--out", "result"], "--out: expected a file path ending"),
    "--out a directory": (lambda w: ["scene.toml", "--out", _dir(w, "d.usda")], "which is a directory"),
    "--out under a file": (lambda w: ["scene.toml", "--out", _file_as_folder(w)], "notafolder is a file"),
    "--out the old preview": (lambda w: ["scene.toml", "--out", "old.png"], "--out: expected"),
    "--preview the input scene": (lambda w: ["scene.toml", "--out", "o.usda", "--preview", "scene.toml"],
                                  "--preview: expected a file path ending in .png, .gif, .mp4"),
    "--preview jpg": (lambda w: ["scene.toml", "--out", "o.usda", "--preview", "p.jpg"], '.mp4, found "p.jpg"'),
    "--preview empty": (lambda w: ["scene.toml", "--out", "o.usda", "--preview", ""], "found an empty path"),
    "--preview a directory": (lambda w: ["scene.toml", "--out", "o.usda", "--preview", _dir(w, "p.png")],
                              "which is a directory"),
    "--preview a link to the scene": (lambda w: ["scene.toml", "--out", "o.usda", "--preview",
                                                 _link_to_scene(w, "p.png")], "would destroy the input"),
    "--preview the old usd": (lambda w: ["scene.toml", "--out", "o.usda", "--preview", "old.usda"],
                              "--preview: expected"),
}


@pytest.mark.parametrize("make,fragment", REFUSED.values(), ids=REFUSED.keys())
def test_bad_output_path_is_refused_before_simulating_and_nothing_is_lost(work, capsys, make, fragment):
    argv = make(work)
    before = snapshot(work)
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                   # refused before the run started
    assert captured.err.startswith("xsim: error: ") and captured.err.count("\n") == 1
    assert fragment in captured.err
    assert snapshot(work) == before


# scene [output] paths (checked the same way; the scene's own key is named)
SCENE_OUTPUTS = {
    "usd a directory": ('[output]\nusd = "d.usda"\n', lambda w: _dir(w, "d.usda"), "output.usd: expected",
                        "which is a directory"),
    "preview a directory": ('[output]\nusd = "o.usda"\npreview = "p.png"\n', lambda w: _dir(w, "p.png"),
                            "output.preview: expected", "which is a directory"),
    "usd under a file": ('[output]\nusd = "notafolder/o.usda"\n', _file_as_folder, "output.usd: expected",
                         "is a file"),
}


@pytest.mark.parametrize("extra,make,key,fragment", SCENE_OUTPUTS.values(), ids=SCENE_OUTPUTS.keys())
def test_bad_output_path_in_the_scene_names_its_key(work, capsys, extra, make, key, fragment):
    (work / "scene.toml").write_text(SCENE + extra)
    make(work)
    before = snapshot(work)
    assert main(["run", "scene.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xsim: error: scene.toml: {key}") and fragment in err
    assert snapshot(work) == before


@pytest.mark.parametrize("out", ["o.usda", "o.usdc", "o.usd", "deeper/folder/o.usda"])
def test_good_output_paths_are_written(work, capsys, out):
    assert main(["run", "scene.toml", "--out", out, "--preview", "shot.png", "--quiet"]) == 0
    assert (work / out).stat().st_size > 0
    assert (work / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (work / "scene.toml").read_text() == SCENE
    assert not [p for p in work.rglob(".*tmp*")]


def test_run_replaces_old_outputs_only_when_complete(work, capsys):
    assert main(["run", "scene.toml", "--out", "old.usda", "--preview", "old.png", "--quiet"]) == 0
    assert (work / "old.usda").read_text().startswith("#usda 1.0")
    assert (work / "old.png").read_bytes()[:4] == b"\x89PNG"


def made_up():
    import numpy as np

    frames = np.zeros((2, 3, 3), np.float32)
    frames[:, 1, 0] = frames[:, 2, 1] = 1.0
    return frames, [ClothPart("c", 0, 3, np.array([[0, 1, 2]]))]


def test_preview_interrupted_mid_write_leaves_the_old_png_and_no_temporary(work, monkeypatch):
    import matplotlib.figure

    def half_then_interrupt(self, fname, **kw):
        Path(fname).write_bytes(b"\x89PNG\r\n\x1a\n truncated")
        raise KeyboardInterrupt
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_then_interrupt)
    frames, parts = made_up()
    with pytest.raises(KeyboardInterrupt):
        save_preview(work / "old.png", frames, parts)
    assert (work / "old.png").read_bytes() == b"previous png"
    assert sorted(p.name for p in work.iterdir()) == ["old.png", "old.usda", "scene.toml"]


def test_preview_killed_mid_write_leaves_the_old_png(work):
    # kill -9 of a real process half-way through writing the PNG: the target keeps its old bytes
    code = ("import os, signal, numpy as np, matplotlib.figure\n"
            "from pathlib import Path\n"
            "from xsim.io import ClothPart, save_preview\n"
            "def half(self, fname, **kw):\n"
            "    Path(fname).write_bytes(b'\\x89PNG half')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "matplotlib.figure.Figure.savefig = half\n"
            "f = np.zeros((2, 3, 3), np.float32)\n"
            "save_preview('old.png', f, [ClothPart('c', 0, 3, np.array([[0, 1, 2]]))])\n")
    repo = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    result = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, timeout=120)
    assert result.returncode == -9, result.stderr.decode()
    assert (work / "old.png").read_bytes() == b"previous png"


def test_usd_write_error_names_the_target_not_the_temporary(work, monkeypatch):
    frames, parts = made_up()
    writer = UsdWriter(fps=30.0)
    writer.add_mesh("c", frames[0], parts[0].triangles)
    monkeypatch.setattr(writer.stage, "GetRootLayer", lambda: type("L", (), {"Export": staticmethod(
        lambda path: False)})())
    with pytest.raises(OSError) as info:
        writer.save(work / "old.usda")
    assert str(info.value) == f"cannot write {work / 'old.usda'}: USD's exporter failed"
    assert (work / "old.usda").read_text() == "previous usd\n"
    assert sorted(p.name for p in work.iterdir()) == ["old.png", "old.usda", "scene.toml"]


@pytest.mark.parametrize("writer", ["usd", "preview"])
def test_folder_that_cannot_be_made_is_named(work, writer):
    frames, parts = made_up()
    (work / "blocker").write_text("a file\n")
    target = work / "blocker" / ("x.usda" if writer == "usd" else "x.png")
    with pytest.raises(OSError) as info:
        (write_usd if writer == "usd" else save_preview)(target, frames, parts)
    assert str(info.value).startswith(f"cannot write {target}: cannot make its folder {work / 'blocker'}")
    assert ".tmp" not in str(info.value)
    assert (work / "blocker").read_text() == "a file\n"


def test_cli_write_error_exits_1_naming_the_target(work, capsys, monkeypatch):
    import errno

    from xsim.io import files

    def disk_full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(src))
    monkeypatch.setattr(files.os, "replace", disk_full)
    assert main(["run", "scene.toml", "--out", "old.usda", "--no-preview", "--quiet"]) == 1
    assert capsys.readouterr().err == "xsim: error: cannot write old.usda: No space left on device\n"
    assert (work / "old.usda").read_text() == "previous usd\n"
    assert sorted(p.name for p in work.iterdir()) == ["old.png", "old.usda", "scene.toml"]


def test_out_and_preview_the_same_existing_file_leaves_it_intact(work, capsys):
    (work / "same.usda").write_text("previous usd\n")
    before = snapshot(work)
    assert main(["run", "scene.toml", "--out", "same.usda", "--preview", "same.usda"]) == 2
    assert "--preview: expected a file path ending in .png" in capsys.readouterr().err
    assert snapshot(work) == before


def test_a_preview_that_fails_after_the_usd_is_written_leaves_both_old_files(work, capsys, monkeypatch):
    from xsim.io import preview

    def fail(path, *args, **kw):
        preview.write_atomically(path, lambda tmp: tmp.write_bytes(b"half"))
        raise RuntimeError("the preview renderer failed")
    monkeypatch.setattr(preview, "save_preview", fail)
    before = snapshot(work)
    assert main(["run", "scene.toml", "--out", "old.usda", "--preview", "old.png", "--quiet"]) == 1
    assert capsys.readouterr().err == "xsim: error: the preview renderer failed\n"
    assert snapshot(work) == before             # the finished USD file was never renamed over old.usda


def test_all_or_nothing_renames_every_file_only_at_its_end(tmp_path):
    from xsim.io.files import all_or_nothing, write_atomically

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    with all_or_nothing():
        write_atomically(a, lambda tmp: tmp.write_text("new a"))
        write_atomically(b, lambda tmp: tmp.write_text("new b"))
        assert a.read_text() == "old a" and not b.exists()
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_check_refuses_an_empty_output_path_naming_the_key(work, capsys):
    (work / "scene.toml").write_text(SCENE + '[output]\nusd = ""\n')
    assert main(["check", "scene.toml"]) == 2
    assert capsys.readouterr().err == ('xsim: error: scene.toml: output.usd: expected a path ending in .usda, '
                                       '.usdc or .usd, found "" (a string)\n')


OPTIMIZE = SCENE.replace("frames = 1", "frames = 2") + (
    "[optimize]\niterations = 1\noptimizer = \"sgd\"\n[[optimize.parameter]]\nkey = \"cloth[0].velocity\"\n"
    "[[optimize.target]]\ntype = \"point\"\ncloth = \"cloth0\"\nframe = 2\nparticle = 0\n"
    "position = [0.0, 0.0, 1.0]\n")


def test_optimize_takes_out_and_preview(work, capsys):
    (work / "scene.toml").write_text(OPTIMIZE)
    assert main(["optimize", "scene.toml", "--out", "fit.usda", "--preview", "fit.png", "--quiet"]) == 0
    assert (work / "fit.usda").read_text().startswith("#usda 1.0")
    assert (work / "fit.png").read_bytes()[:4] == b"\x89PNG"
    assert "fit.usda" in capsys.readouterr().out
    fitted = (work / "out" / "scene_fitted.toml").read_text()
    assert 'usd = "fit.usda"' in fitted and 'preview = "fit.png"' in fitted
    assert not [p for p in work.rglob(".*tmp*")]


def test_optimize_refuses_a_bad_out_before_fitting(work, capsys):
    (work / "scene.toml").write_text(OPTIMIZE)
    before = snapshot(work)
    assert main(["optimize", "scene.toml", "--out", "scene.toml"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--out: expected a file path ending in .usda" in captured.err
    assert snapshot(work) == before


def test_ctrl_c_during_a_run_writes_nothing_and_keeps_the_old_files(work, capsys, monkeypatch):
    """Ctrl-C in the middle of the simulation (in its second step here): exit 130, a line saying nothing
    was written, and the old USD file and preview exactly as they were."""
    from xsim.solvers import SolverXPBD

    (work / "scene.toml").write_text(SCENE.replace("frames = 1", "frames = 3"))
    before = snapshot(work)
    monkeypatch.setattr(SolverXPBD, "step", _interrupting(SolverXPBD.step))
    assert main(["run", "scene.toml", "--out", "old.usda", "--preview", "old.png", "--quiet"]) == 130
    assert "interrupted; no file written" in capsys.readouterr().err
    assert snapshot(work) == before


def _interrupting(step):
    """``step`` that raises KeyboardInterrupt in the second call, as Ctrl-C would mid-run."""
    calls = []

    def wrapped(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return step(self, *args, **kwargs)
    return wrapped
