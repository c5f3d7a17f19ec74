#!/usr/bin/python3
"""Fits the polynomials of the CPU's vectorized erf (kernels/cpu/VecMath.cpp).

    erf(x) = x P(x^2)                 0 <= x < 1    P of degree 6
    erf(x) = 1 - exp(-x^2) R(1/x)     1 <= x < 4    R of degree 9

Least squares in relative error on 4000 points (mpmath's erf as the truth),
then the float32 evaluation (Horner, as the kernel does it) is checked on a
sweep. Prints the coefficients, highest degree first, as the kernel spells
them. Needs numpy and mpmath (Debian: python3-numpy, python3-mpmath).
"""
import mpmath
import numpy as np

mpmath.mp.dps = 30
f32 = np.float32


def fit(points, target, variable, degree):
    v = np.vander(variable(points), degree + 1)
    c, *_ = np.linalg.lstsq(v / target[:, None], np.ones_like(target),
                            rcond=None)
    return [f32(x) for x in c]


def horner(c, x):
    p = c[0]
    for a in c[1:]:
        p = f32(p * x + a)
    return p


def erf32(x, small, large):
    a = abs(x)
    if a < 1:
        return f32(horner(small, f32(a * a)) * a)
    if a >= 4:
        return f32(1)
    e = f32(np.exp(f32(-f32(a * a))))
    return f32(f32(1) - f32(e * horner(large, f32(f32(1) / a))))


xs = np.linspace(1e-4, 1.0, 4000)
small = fit(xs, np.array([float(mpmath.erf(x)) / x for x in xs]),
            lambda x: x * x, 6)
xs = np.linspace(1.0, 4.0, 4000)
large = fit(xs, np.array([float(mpmath.erfc(x) * mpmath.exp(x * x))
                          for x in xs]), lambda x: 1 / x, 9)
worst = 0.0
for x in np.linspace(0, 4.5, 30001).astype(np.float32):
    ref = float(mpmath.erf(float(x)))
    got = float(erf32(x, small, large))
    worst = max(worst, abs(got - ref) / float(np.spacing(f32(abs(ref)))))
print("P:", ", ".join("%.9e" % c for c in small))
print("R:", ", ".join("%.9e" % c for c in large))
print("worst on the sweep: %.2f ulp" % worst)
