"""`numerator lambda-image --force` and SAM's layer: the layer SAM built on the stand-in image
(`REPOSITORY:…rapid-ARCH`, by samcli's own LambdaImage) is removed when the image is built again,
and so is the image it stood on, so that SAM builds its layer again on the new one instead of
running the old. On an image of this test's own, a few files (a shell, `mv`, `chmod`: what SAM's
Dockerfile runs) in place of the debootstrap, so that it takes seconds and leaves the machine's
stand-in image alone. Needs a Docker daemon (tests/samlocal.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from numerator import lambdaimage
from tests.samlocal import docker_daemon

pytestmark = pytest.mark.slow

TOOLS = ("/bin/sh", "/bin/mv", "/bin/chmod")


def small_root(root: Path) -> None:
    """In place of debootstrap: SAM's Dockerfile's tools and the libraries they link, and a file
    that differs each build (as two debootstraps do)."""
    for tool in TOOLS:
        for source in [tool, *linked(tool)]:
            target = root / Path(source).resolve().relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(source).resolve(), target)
            if Path(source).resolve() != Path(source):
                alias = root / Path(source).relative_to("/")
                alias.parent.mkdir(parents=True, exist_ok=True)
                if not alias.exists():
                    alias.symlink_to(Path(source).resolve())
    (root / "built").write_text(uuid.uuid4().hex)


def linked(tool: str) -> list[str]:
    said = subprocess.run(["ldd", tool], capture_output=True, text=True, check=True).stdout
    return [word for word in said.split() if word.startswith("/")]


MADE: list[str] = []  # the images a test made, by id: removed after it, the last first


@pytest.fixture
def repository(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    docker_daemon()
    imported = lambdaimage.docker_import

    def docker_import(root: Path, tag: str, labels: dict[str, str]) -> None:
        imported(root, tag, labels)
        MADE.append(str(lambdaimage.image_id(tag)))

    monkeypatch.setattr(lambdaimage, "debootstrap", lambda root: small_root(root))
    monkeypatch.setattr(lambdaimage, "place_python", lambda interpreter, root: None)
    monkeypatch.setattr(lambdaimage, "place_runtime", lambda root: None)
    monkeypatch.setattr(lambdaimage, "docker_import", docker_import)
    name = f"numerator-test-{uuid.uuid4().hex[:8]}/python"
    yield name
    tagged = subprocess.run(
        [
            "docker",
            "images",
            "--format",
            "{{.Repository}}:{{.Tag}}",
            "--filter",
            f"reference={name}",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for image in [*tagged, *reversed(MADE)]:
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True, check=False)
    MADE.clear()


def sam_layer(tag: str, cache: Path) -> str:
    """SAM's layer on `tag`, built as `sam local invoke --skip-pull-image` builds it."""
    from samcli.local.docker.lambda_image import LambdaImage
    from samcli.local.layers.layer_downloader import LayerDownloader

    images = LambdaImage(
        LayerDownloader(str(cache), str(cache), []),
        skip_pull_image=True,
        force_image_build=False,
        invoke_images={None: tag},
    )
    layer = str(images.build("python3.12", "Zip", None, [], lambdaimage.host_arch()))
    MADE.append(str(lambdaimage.image_id(layer)))
    return layer


def test_a_rebuild_removes_sams_layer_on_the_old_image(repository: str, tmp_path: Path) -> None:
    tag = lambdaimage._build(sys.executable, force=False, repository=repository)
    first = lambdaimage.image_id(tag)
    layer = sam_layer(tag, tmp_path)
    assert lambdaimage.sam_layers(tag) == [layer]
    assert lambdaimage.layers(layer)[:1] == lambdaimage.layers(tag)
    assert sam_layer(tag, tmp_path) == layer  # SAM reuses its layer while it is there

    assert lambdaimage._build(sys.executable, force=True, repository=repository) == tag

    assert lambdaimage.image_id(tag) not in (None, first)
    assert lambdaimage.image_id(layer) is None, "SAM's layer on the old image is left"
    assert first is not None and lambdaimage.image_id(first) is None, "the old image is left"
    again = sam_layer(tag, tmp_path)
    assert again == layer
    assert lambdaimage.layers(again)[:1] == lambdaimage.layers(tag)  # on the new image


def test_reusing_the_image_removes_a_stale_layer_left_before(
    repository: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine whose layer went stale before the rebuild removed it: the next build (reusing
    the image) removes it."""
    tag = lambdaimage._build(sys.executable, force=False, repository=repository)
    layer = sam_layer(tag, tmp_path)
    old = lambdaimage.image_id(tag)
    subprocess.run(["docker", "tag", tag, f"{repository}:old"], check=True)
    with monkeypatch.context() as before_this_change:
        before_this_change.setattr(lambdaimage, "forget_stale", lambda tag, before=None: [])
        lambdaimage._build(sys.executable, force=True, repository=repository)
    assert lambdaimage.image_id(layer) is not None  # stale, as a build before this change left it

    assert lambdaimage._build(sys.executable, force=False, repository=repository) == tag

    assert lambdaimage.image_id(layer) is None
    assert lambdaimage.image_id(f"{repository}:old") == old  # tagged by someone: kept
