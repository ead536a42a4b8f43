"""The working_dir digest (controller/code_digest.py): what changes it and what does not."""

from __future__ import annotations

import os

import pytest

from servefleet.controller.goals.code_digest import TreeTooLarge, tree_digest
from servefleet.controller.goals.code_rules import IgnoreFileError


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "app"
    (root / "pkg").mkdir(parents=True)
    (root / "main.py").write_text("print('main')\n")
    (root / "pkg" / "model.py").write_text("WEIGHTS = 1\n")
    return root


def test_the_same_files_give_the_same_digest_wherever_they_are(tree, tmp_path) -> None:
    first = tree_digest(str(tree), [])
    assert len(first) == 16 and first == tree_digest(str(tree), [])
    copy = tmp_path / "copy"
    (copy / "pkg").mkdir(parents=True)
    (copy / "pkg" / "model.py").write_text("WEIGHTS = 1\n")  # created in another order
    (copy / "main.py").write_text("print('main')\n")
    assert tree_digest(str(copy), []) == first


@pytest.mark.parametrize("change", [
    lambda root: (root / "pkg" / "model.py").write_text("WEIGHTS = 2\n"),
    lambda root: (root / "pkg" / "new.py").write_text(""),
    lambda root: (root / "main.py").unlink(),
    lambda root: (root / "main.py").rename(root / "pkg" / "main.py"),
    lambda root: os.chmod(root / "main.py", 0o755),
    lambda root: os.symlink("pkg/model.py", root / "link.py"),
])
def test_any_change_to_the_code_changes_the_digest(tree, change) -> None:
    before = tree_digest(str(tree), [])
    change(tree)
    assert tree_digest(str(tree), []) != before


def test_caches_vcs_and_excluded_files_do_not_count(tree) -> None:
    excludes = ["data/", "*.csv", "/notes.txt", "pkg/scratch*"]
    before = tree_digest(str(tree), excludes)
    for path, content in [("__pycache__/main.cpython-311.pyc", "x"), (".git/HEAD", "ref"),
                          ("pkg/__pycache__/model.pyc", "x"), (".venv/bin/python", "x"),
                          ("data/weights.bin", "w"), ("pkg/data/more.bin", "w"),
                          ("run.csv", "l"), ("pkg/deep/run.csv", "l"), ("notes.txt", "n"),
                          ("pkg/scratch_1.py", "s")]:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(content)
    assert tree_digest(str(tree), excludes) == before
    # An anchored pattern matches only from the root; a dir pattern only directories.
    (tree / "pkg" / "notes.txt").write_text("n")
    assert tree_digest(str(tree), excludes) != before
    (tree / "pkg" / "notes.txt").unlink()
    (tree / "data.py").write_text("")
    assert tree_digest(str(tree), excludes) != before


def test_symlinks_are_hashed_as_links_not_followed(tree, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_text("a")
    os.symlink(outside, tree / "linked")
    before = tree_digest(str(tree), [])
    (outside / "big.bin").write_text("b")  # behind the link: not part of this tree
    assert tree_digest(str(tree), []) == before
    os.mkfifo(tree / "pipe")  # would block a reader: skipped
    assert tree_digest(str(tree), []) == before


def test_a_missing_directory_has_no_digest(tmp_path) -> None:
    assert tree_digest(str(tmp_path / "nowhere"), []) == ""


def test_too_large_a_tree_is_refused(tree) -> None:
    with pytest.raises(TreeTooLarge, match="more than 1 files"):
        tree_digest(str(tree), [], max_files=1)
    with pytest.raises(TreeTooLarge, match=r"more than 50000 files or 9\.5"):
        tree_digest(str(tree), [], max_bytes=10)
    assert tree_digest(str(tree), ["pkg/"], max_files=1)  # excluding is the way out


CONFIG = """# deployed with servefleet deploy
http_options: {port: 8000}
applications:
  - name: app
    import_path: main:app
    deployments: [{name: Model, user_config: {threshold: 1}}]
"""


def test_a_servefleet_config_file_beside_the_code_is_not_code(tree) -> None:
    (tree / "config.yaml").write_text(CONFIG)
    before = tree_digest(str(tree), [])
    (tree / "config.yaml").write_text(CONFIG.replace("threshold: 1", "threshold: 2"))
    (tree / "pkg" / "prod.yml").write_text(CONFIG)  # another config file, anywhere
    assert tree_digest(str(tree), []) == before
    # YAML the model reads is code, as is a config-shaped file not named *.yaml.
    (tree / "labels.yaml").write_text("labels: [cat, dog]\n")
    assert tree_digest(str(tree), []) != before
    before = tree_digest(str(tree), [])
    (tree / "config.txt").write_text(CONFIG)
    assert tree_digest(str(tree), []) != before


def test_documents_logs_editor_files_and_servefleet_state_are_not_code(tree) -> None:
    before = tree_digest(str(tree), [])
    for path in ["README.md", "docs/guide.rst", "serve.log", "main.py~", ".main.py.swp",
                 ".DS_Store", ".idea/workspace.xml", ".vscode/settings.json",
                 ".servefleet/state.db", ".servefleetignore"]:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text("x")
    assert tree_digest(str(tree), []) == before


def test_servefleetignore_and_negation_name_more_or_fewer(tree) -> None:
    (tree / "prompt.md").write_text("You are helpful.")
    (tree / "data").mkdir()
    (tree / "data" / "big.bin").write_text("1")
    with_data = tree_digest(str(tree), [])
    (tree / ".servefleetignore").write_text("# data the replicas load lazily\ndata/\n!prompt.md\n")
    ignored = tree_digest(str(tree), [])
    assert ignored != with_data
    (tree / "data" / "big.bin").write_text("2")  # ignored now
    assert tree_digest(str(tree), []) == ignored
    (tree / "prompt.md").write_text("You are terse.")  # taken back from the defaults
    assert tree_digest(str(tree), []) != ignored
    # The spec's excludes come last and win over the file.
    spec_excluded = tree_digest(str(tree), ["prompt.md"])
    (tree / "prompt.md").write_text("You are brief.")
    assert tree_digest(str(tree), ["prompt.md"]) == spec_excluded


def test_an_unusable_ignore_file_is_refused(tree) -> None:
    (tree / ".servefleetignore").write_bytes(b"\xff\xfe")
    with pytest.raises(IgnoreFileError, match="not UTF-8"):
        tree_digest(str(tree), [])
    (tree / ".servefleetignore").write_text("x\n" * 300)
    with pytest.raises(IgnoreFileError, match="more than 256 patterns"):
        tree_digest(str(tree), [])


def test_a_tagged_state_directory_is_not_code_whatever_its_name(tree) -> None:
    """`servefleet up --state-dir state` inside the project: the store and logs
    there change all the time, and must not roll anything out."""
    from servefleet._private import state_dir

    before = tree_digest(str(tree), [])
    state_dir.tag(tree / "state")
    (tree / "state" / "state.db").write_text("changing")
    assert tree_digest(str(tree), []) == before
    (tree / "untagged").mkdir()
    (tree / "untagged" / "CACHEDIR.TAG").write_text("not the signature")
    assert tree_digest(str(tree), []) != before


def test_the_controllers_own_store_files_are_not_code(tree, tmp_path) -> None:
    """A sqlite store inside the working dir changes on every write."""
    from servefleet.controller.store import local_files

    store = local_files(f"sqlite://{tree}/state.db")
    assert store == tuple(f"{tree}/state.db{s}" for s in ("", "-wal", "-shm", "-journal"))
    before = tree_digest(str(tree), [], not_code=store)
    for path in store:
        with open(path, "a") as f:
            f.write("a write")
        assert tree_digest(str(tree), [], not_code=store) == before
    assert tree_digest(str(tree), []) != before  # another controller's store would count
    # The store named through a link to the working dir is the same file.
    os.symlink(tree, tmp_path / "link")
    assert tree_digest(str(tree), [], not_code=local_files(
        f"sqlite://{tmp_path}/link/state.db")) == before
    assert local_files("etcd://127.0.0.1:2379") == ()
    # Only those paths: a file of the same name elsewhere in the tree is code.
    (tree / "pkg" / "state.db").write_text("x")
    assert tree_digest(str(tree), [], not_code=store) != before
