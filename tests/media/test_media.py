"""Manifest loading, the synthetic set, timed decoding and packing."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.core.errors import UserError
from lmmbench.media.extract import MediaError, extract_sample, read_video
from lmmbench.media.manifest import load_manifest, write_manifest
from lmmbench.media.synth import SynthConfig, synth_media


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synth")
    synth_media(root, SynthConfig(video_durations_s=(1.0, 2.0), audio_durations_s=(1.0,), seed=3))
    return root


def test_synth_writes_videos_with_audio_images_wavs_and_a_loadable_manifest(synth_dir: Path) -> None:
    import av

    rows = load_manifest(synth_dir / "manifest.csv")
    assert [r.id for r in rows] == ["video_1s", "video_2s", "image_224x224", "audio_1s"]
    assert rows[0].video is not None and rows[0].video.is_file()
    assert rows[2].image is not None and rows[2].audio is not None
    assert rows[0].extra["group"] == "video+audio"
    with av.open(str(rows[1].video)) as c:
        assert len(c.streams.video) == 1 and len(c.streams.audio) == 1


def test_synth_is_reproducible(tmp_path: Path) -> None:
    cfg = SynthConfig(video_durations_s=(1.0,), image_sizes=(), audio_durations_s=(1.0,), seed=7)
    a = extract_sample(synth_media(tmp_path / "a", cfg).parent / "video/clip_1s.mp4", None, None)
    b = extract_sample(synth_media(tmp_path / "b", cfg).parent / "video/clip_1s.mp4", None, None)
    assert a.frames is not None and b.frames is not None
    assert (a.frames == b.frames).all()
    assert (tmp_path / "a/audio/tone_1s.wav").read_bytes() == (tmp_path / "b/audio/tone_1s.wav").read_bytes()


def test_extract_samples_frames_at_fps_and_the_audio_track(synth_dir: Path) -> None:
    frames, rate, audio, duration = read_video(synth_dir / "video/clip_2s.mp4", fps=2.0)
    assert frames.shape[0] == 4 and frames.shape[-1] == 3
    assert rate == pytest.approx(10.0) and duration == pytest.approx(2.0)
    assert audio is not None and abs(audio.shape[0] - 32000) < 2048  # 2 s at 16 kHz (+ AAC priming)
    av_ = extract_sample(synth_dir / "video/clip_2s.mp4", None, None, fps=2.0)
    assert av_.extract_ms > 0 and av_.duration == pytest.approx(2.0)


def test_corrupt_media_raise_media_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x01not a video" * 100)
    with pytest.raises(MediaError, match=r"bad\.mp4"):
        extract_sample(bad, None, None)
    bad_wav = tmp_path / "bad.wav"
    bad_wav.write_bytes(b"RIFFxxxx" * 10)
    with pytest.raises(MediaError, match=r"bad\.wav"):
        extract_sample(None, None, bad_wav)


def _manifest(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    return write_manifest(tmp_path / "m.csv", rows)


def test_manifest_extras_are_carried_and_paths_resolved(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(b"x")
    rows = load_manifest(_manifest(tmp_path, [{"id": "s1", "audio": "a.wav", "prompt": "p", "lang": "en"}]))
    assert rows[0].audio == (tmp_path / "a.wav").resolve()
    assert rows[0].extra == {"lang": "en"} and rows[0].modalities == "audio"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("id,video,prompt\ns1,,hi\n", r"m\.csv: missing column\(s\) image, audio"),
        ("id,video,image,audio,prompt\ns1,nope.mp4,,,hi\n", r"m\.csv:2: video file not found"),
        ("id,video,image,audio,prompt\ns1,,,,hi\ns1,,,,hi\n", r"m\.csv:3: duplicate id 's1'"),
        ("id,video,image,audio,prompt\n", "has no rows"),
    ],
)
def test_bad_manifests_raise_one_clear_user_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "m.csv"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        load_manifest(path)


def test_empty_media_file_is_a_user_error_naming_the_row(tmp_path: Path) -> None:
    (tmp_path / "empty.png").write_bytes(b"")
    path = _manifest(tmp_path, [{"id": "s1", "image": "empty.png", "prompt": "p"}])
    with pytest.raises(UserError, match=r"m\.csv:2: image file is empty"):
        load_manifest(path)


def test_media_synth_command_writes_the_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lmmbench.cli.main import main

    out = tmp_path / "set"
    assert main(["media", "synth", "--out-dir", str(out), "--video-seconds", "1", "--audio-seconds", "1",
                 "--image-sizes", "64"]) == 0
    assert "manifest.csv" in capsys.readouterr().out
    rows = load_manifest(out / "manifest.csv")
    assert [r.modalities for r in rows] == ["video", "image+audio", "audio"]
    assert main(["media", "synth", "--out-dir", str(out), "--video-seconds", "0"]) == 2
