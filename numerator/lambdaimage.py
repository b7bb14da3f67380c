"""`numerator lambda-image`: a stand-in for AWS's Lambda base image, for `sam local` where no
image registry answers.

`sam local invoke` and `sam local start-api --skip-pull-image` only need an image *named* like
AWS's (`public.ecr.aws/lambda/python:3.12-x86_64`): they build their own layer on top of it with
the Runtime Interface Emulator from the aws-sam-cli wheel. This makes that image from Debian's
packages and PyPI alone: a `debootstrap --variant=minbase` root, this machine's Python 3.12 at
/var/lang with the shared libraries it links, awslambdaric under /var/runtime and a
/var/runtime/bootstrap that runs it, then `docker import`. A label records the inputs; the same
inputs again reuse the image. Where AWS's images can be pulled, none of this is needed.

SAM builds its own layer on the image (`public.ecr.aws/lambda/python:3.12-rapid-x86_64`, the
Runtime Interface Emulator added; `samcli/lambda-…` with layers) and, with `--skip-pull-image`,
keeps using it while it exists: built again here, the image would go unused under a layer on the
one before it. So every build, or reuse, removes SAM's layers built on another image than the
current, and the image they stood on once nothing else holds it (see docs/testing.md, "What a run
leaves behind").
"""

from __future__ import annotations

import argparse
import fcntl
import fnmatch
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infra.errors import NumeratorError
from infra.run.process import RUNTIME, runtime_python

RECIPE = 1  # raise when the steps below change what the image holds
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
AWSLAMBDARIC = "awslambdaric==4.2.2"
# What the runtime's Python links (its lib-dynload modules, not tkinter's) beyond minbase, and
# the CA bundle for HTTPS to AWS.
PACKAGES = (
    "ca-certificates",
    "libssl3",
    "libsqlite3-0",
    "libffi8",
    "libncursesw6",
    "libreadline8",
    "libexpat1",
    "libnsl2",
    "libtirpc3",
    "libbsd0",
)
ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
STANDS_IN = (
    "a stand-in for AWS's public.ecr.aws/lambda/python:{version} image, built by `numerator "
    "lambda-image` from Debian {suite} and PyPI; where AWS's images can be pulled, use those"
)
# As AWS's python images set them (LAMBDA_TASK_ROOT is where sam mounts the code).
ENVIRONMENT = {
    "LANG": "en_US.UTF-8",
    "TZ": ":/etc/localtime",
    "PATH": "/var/lang/bin:/usr/local/bin:/usr/bin:/bin:/opt/bin",
    "LD_LIBRARY_PATH": "/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:"
    "/var/task:/var/task/lib:/opt/lib",
    "LAMBDA_TASK_ROOT": "/var/task",
    "LAMBDA_RUNTIME_DIR": "/var/runtime",
}
BOOTSTRAP = f"""#!/bin/sh
# The runtime the emulator starts: awslambdaric, fetching events from the emulator's API.
export PYTHONPATH="/var/runtime${{PYTHONPATH:+:$PYTHONPATH}}"
exec /var/lang/bin/python{RUNTIME} -m awslambdaric "$_HANDLER"
"""
LABEL = "io.numerator.lambda-image.inputs"
REPOSITORY = "public.ecr.aws/lambda/python"
SAM_LAYERS = "samcli/lambda-python"  # SAM's layer image when the function has layers


class ImageError(NumeratorError):
    pass


def run_lambda_image(args: argparse.Namespace) -> None:
    tag = build(python=args.python, force=args.force)
    print(tag)


def build(python: str | None = None, force: bool = False) -> str:
    """The stand-in image's tag, built unless an image of that tag has the same inputs. One
    build at a time on a machine (a file lock): a second waits, then reuses what the first
    built (CI starts one in the background, before the tests that need it ask)."""
    docker_ready()
    with open(Path(tempfile.gettempdir()) / "numerator-lambda-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(python, force)


def _build(python: str | None, force: bool, repository: str = REPOSITORY) -> str:
    interpreter = Path(python) if python else runtime_python()
    if interpreter is None:
        raise ImageError(f"no python{RUNTIME} here (pyenv's, or on PATH); name one with --python")
    arch = host_arch()
    tag = f"{repository}:{RUNTIME}-{arch}"
    inputs = recipe(interpreter, arch)
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    if not force and labelled(tag) == digest:
        say(f"{tag}: reusing the stand-in image (same inputs, {digest})")
        forget_stale(tag)
        return tag
    say(f"{tag}: building {STANDS_IN.format(version=RUNTIME, suite=SUITE)}")
    started = time.monotonic()
    before = image_id(tag)
    with tempfile.TemporaryDirectory(prefix="numerator-lambda-image-") as folder:
        root = Path(folder) / "root"
        debootstrap(root)
        place_python(interpreter, root)
        place_runtime(root)
        docker_import(root, tag, {LABEL: json.dumps(inputs, sort_keys=True), "digest": digest})
    say(f"{tag}: built in {time.monotonic() - started:.0f} s")
    forget_stale(tag, before)
    return tag


def image_id(reference: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def sam_layers(tag: str) -> list[str]:
    """SAM's layer images that stand on `tag`: its repository's tags that SAM names as its own
    (`…:3.12-rapid-x86_64`, `…:rapid-x86_64`: samcli's `LambdaImage.is_rapid_image`), and for
    AWS's name, `samcli/lambda-python:3.12-x86_64-…` (a function with layers)."""
    repository, version = tag.rsplit(":", 1)
    with_layers = f"{SAM_LAYERS}:{version}-*"
    filters = [f"reference={repository}"]
    if repository == REPOSITORY:
        filters.append(f"reference={with_layers}")
    done = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"]
        + [a for f in filters for a in ("--filter", f)],
        capture_output=True,
        text=True,
        check=False,
    )
    found = []
    for name in done.stdout.split():
        label = name.rsplit(":", 1)[1]
        if fnmatch.fnmatch(name, with_layers) or label.startswith("rapid-") or "-rapid-" in label:
            found.append(name)
    return found


def layers(reference: str) -> list[str]:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", reference],
        capture_output=True,
        text=True,
        check=False,
    )
    return list(json.loads(done.stdout)) if done.returncode == 0 else []


def forget_stale(tag: str, before: str | None = None) -> list[str]:
    """Remove SAM's layers built on another image than `tag` is now (SAM would go on using
    them), and `before`, the image `tag` named until this build, once nothing holds it; what
    was removed. An image a container still uses is left, saying so."""
    base = layers(tag)
    if not base:
        return []
    stale = {
        name: "SAM's layer on an earlier stand-in image"
        for name in sam_layers(tag)
        if layers(name)[: len(base)] != base
    }
    if before and before != image_id(tag):
        stale[before] = "the earlier stand-in image"
    removed = []
    for name, what in stale.items():
        if image_id(name) is None:  # untagged, it went with the last layer on it
            removed.append(name)
            continue
        done = subprocess.run(
            ["docker", "image", "rm", name], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            removed.append(name)
            say(f"removed {name}, {what}")
        else:
            say(f"kept {name}, {what}: {done.stderr.strip()}")
    return removed


def recipe(interpreter: Path, arch: str) -> dict[str, object]:
    """What the image is made of: the label that decides whether to build again."""
    version = subprocess.run(
        [str(interpreter), "-c", "import sys; print(sys.version)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        "recipe": RECIPE,
        "suite": SUITE,
        "packages": list(PACKAGES),
        "python": str(interpreter.resolve()),
        "python_version": version,
        "awslambdaric": AWSLAMBDARIC,
        "arch": arch,
    }


def host_arch() -> str:
    machine = platform.machine().lower()
    if machine not in ARCHES:
        raise ImageError(f"no Lambda architecture for this machine's CPU ({machine})")
    return ARCHES[machine]


def docker_ready() -> None:
    """Raise, saying how to start one, unless a Docker daemon answers."""
    if shutil.which("docker") is None:
        raise ImageError(NO_DOCKER.format(what="no docker command here"))
    done = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageError(NO_DOCKER.format(what="no Docker daemon answers"))


NO_DOCKER = (
    "{what}. sam local runs functions in containers: on Linux as root, `apt-get install "
    "docker.io` and start the daemon (`dockerd > /var/log/dockerd.log 2>&1 &`, or `systemctl "
    "start docker`); elsewhere start Docker Desktop. See docs/deploy.md."
)


def labelled(tag: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", '{{ index .Config.Labels "digest" }}', tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def debootstrap(root: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageError("no debootstrap here: `apt-get install debootstrap` (Debian, as root)")
    step(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(root),
            MIRROR,
        ],
        "debootstrap",
    )
    for waste in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        shutil.rmtree(root / waste, ignore_errors=True)


def place_python(interpreter: Path, root: Path) -> None:
    """The interpreter's installation at /var/lang, without its tests, its tkinter and its own
    site-packages (Lambda's /var/lang has the runtime's, the function brings the rest)."""
    prefix = interpreter.resolve().parent.parent
    library = f"lib/python{RUNTIME}"
    shutil.copytree(
        prefix,
        root / "var/lang",
        symlinks=True,
        ignore=shutil.ignore_patterns("test", "idlelib", "tkinter", "turtledemo", "_tkinter*"),
    )
    site = root / "var/lang" / library / "site-packages"
    shutil.rmtree(site)
    site.mkdir()


def place_runtime(root: Path) -> None:
    runtime = root / "var/runtime"
    step(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(runtime),
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            RUNTIME,
            "--platform",
            f"manylinux2014_{platform.machine()}",
            AWSLAMBDARIC,
        ],
        "pip install awslambdaric",
    )
    (runtime / "bootstrap").write_text(BOOTSTRAP)
    (runtime / "bootstrap").chmod(0o755)
    (root / "var/task").mkdir(exist_ok=True)


def docker_import(root: Path, tag: str, labels: dict[str, str]) -> None:
    description = STANDS_IN.format(version=RUNTIME, suite=SUITE)
    changes = [
        *(f"ENV {key}={value}" for key, value in ENVIRONMENT.items()),
        "WORKDIR /var/task",
        'ENTRYPOINT ["/var/runtime/bootstrap"]',
        f"LABEL org.opencontainers.image.description={json.dumps(description)}",
        *(f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()),
    ]
    command = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
    # `with`: the pipe's end in this process is closed and tar waited for (left open, it was a
    # ResourceWarning, an error under pytest, whenever the image was built afresh)
    with subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE) as tar:
        done = subprocess.run(
            command, stdin=tar.stdout, capture_output=True, text=True, check=False
        )
    if done.returncode != 0 or tar.returncode != 0:
        raise ImageError(f"docker import failed: {done.stderr.strip()[-2000:]}")


def step(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def say(message: str) -> None:
    print(f"numerator lambda-image: {message}", file=sys.stderr, flush=True)
