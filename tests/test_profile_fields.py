"""The profile fields checked on read (autotune.spec.profile_fields, no calibrate import) are the
ones calibrate writes and reads back."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path

from autotune.calibrate.fit import Measurement
from autotune.spec import profile_fields

ROOT = Path(__file__).resolve().parents[1]


def test_measurement_keys_are_the_measurement_fields_with_their_types():
    hints = typing.get_type_hints(Measurement)
    fields = {f.name: f for f in dataclasses.fields(Measurement)}
    assert set(profile_fields.MEASUREMENT_KEYS) == set(fields)
    for name, hint in profile_fields.MEASUREMENT_KEYS.items():
        assert hints[name] is hint, name
    optional = {n for n, f in fields.items() if f.default is not dataclasses.MISSING}
    assert optional == set(profile_fields._OPTIONAL_MEASUREMENT_KEYS)


def test_shipped_profiles_keep_only_checked_host_keys_and_measurements():
    """Every host key a shipped profile has is typed (device and kind are the device's own)."""
    for path in (ROOT / "autotune/data/devices").glob("*.json"):
        data = json.loads(path.read_text())
        assert set(data["host"]) - {"device", "kind"} <= set(profile_fields._HOST_KEYS), path.name
        for m in data.get("measurements", []):
            Measurement(**m)  # what the spec-level check lets through, calibrate builds
        profile_fields.check_kept(data)


def test_reading_a_profile_does_not_import_calibrate():
    code = ("import sys; from autotune.spec.hardware_data import shipped_profile; shipped_profile('cpu'); "
            "print(any(m.startswith('autotune.calibrate') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
