"""The client packages as their users get them: `npm pack` of a package under clients/ (as
`make clients` built it, its client bundled), and `npm install` of the tarball, offline, into a
folder holding nothing else, so the tarball must carry all it needs."""

import json
import subprocess
from pathlib import Path

NPM_TIMEOUT = 180


class PackageUnavailable(RuntimeError):
    """A package cannot be packed or installed: not built (`make clients`), or npm failed."""


def pack(package: Path, directory: Path) -> Path:
    """`npm pack` of ``package`` into ``directory``; the tarball. Without the package's scripts: a
    `prepack` would build again what `make clients` built."""
    bundled = json.loads((package / "package.json").read_text()).get("bundleDependencies", [])
    for name in bundled:
        if not (package / "node_modules" / name / "package.json").exists():
            raise PackageUnavailable(f"{package} has no node_modules/{name} to bundle: run `make clients`")
    directory.mkdir(parents=True, exist_ok=True)
    packed = _npm(["pack", "--json", "--ignore-scripts", "--pack-destination", str(directory)], cwd=package)
    [info] = json.loads(packed.stdout)
    return directory / info["filename"]


def install(tarball: Path, directory: Path, *, package: dict) -> subprocess.CompletedProcess:
    """`npm install` of ``tarball`` into ``directory``, made the package ``package`` (its
    package.json) unless it is one already; npm's answer, for the caller to check."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "package.json").exists():
        (directory / "package.json").write_text(json.dumps(package))
    return subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--offline", str(tarball)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT,
    )


def _npm(arguments: list[str], *, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(["npm", *arguments], cwd=cwd, capture_output=True, text=True, timeout=NPM_TIMEOUT)
    if done.returncode != 0:
        raise PackageUnavailable(f"npm {arguments[0]} failed in {cwd}:\n{done.stderr[-2000:]}")
    return done
