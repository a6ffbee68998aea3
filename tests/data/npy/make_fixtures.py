# Writes the small .npy fixtures that tests/test_npy.cpp reads, so the reader is checked against
# files written by numpy itself. Run from anywhere: python3 tests/data/npy/make_fixtures.py
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def save(name, arr, version=None):
    with open(os.path.join(here, name), "wb") as f:
        np.lib.format.write_array(f, arr, version=version, allow_pickle=True)


# Readable: one per supported dtype, Fortran order, scalar, NPY 2.0 and 3.0 headers.
save("f32_3x4x8.npy", (np.arange(96, dtype="<f4") * 0.5 - 7).reshape(3, 4, 8))
save("f64_fortran_2x3x4.npy", np.asfortranarray(np.arange(24, dtype="<f8").reshape(2, 3, 4)))
save("f16_special.npy", np.array([1.0, -2.5, 65504.0, 2.0**-24, np.inf], dtype="<f2"))
save("bool_2x3.npy", np.array([[True, False, True], [False, False, True]]))
save("u8_5.npy", np.array([0, 1, 127, 128, 255], dtype="u1"))
save("i64_scalar.npy", np.array(-1234567890123, dtype="<i8"))
save("f32_v2.npy", np.arange(6, dtype="<f4").reshape(2, 3), version=(2, 0))
save("f32_v3.npy", np.arange(6, dtype="<f4").reshape(2, 3), version=(3, 0))
# Refused with a FileError that says what is supported.
save("f32_big_endian.npy", np.arange(4, dtype=">f4"))
save("i32.npy", np.arange(3, dtype="<i4"))
save("object.npy", np.array([1, "a", None], dtype=object))
save("structured.npy", np.zeros(2, dtype=[("x", "<f4"), ("y", "<i8")]))
