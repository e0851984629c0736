"""Java numeric semantics the quota formulas depend on, and QuotaUtils' throttle time.

Kafka computes in doubles and rounds with `Math.round`; reproducing its throttle times to the
millisecond needs the same rounding and the same saturation, not Python's banker's `round`.
"""

from __future__ import annotations

import math

LONG_MAX = 9223372036854775807
LONG_MIN = -9223372036854775808
INT_MAX = 2147483647
INT_MIN = -2147483648
#: `Long.MAX_VALUE` as the double Kafka uses for "no limit" (quotaLimit of unknown tags).
UNLIMITED = float(LONG_MAX)
#: `Int.MaxValue`: for connection rates this value means "disabled".
INT_MAX_F = float(INT_MAX)


def java_round(x: float) -> int:
    """`Math.round(double)`: half up, NaN -> 0, saturating at the long range.

    `floor(x + 0.5)` is wrong for 0.49999999999999994; comparing the exact fraction is not.
    """
    if x != x:
        return 0
    if x >= 9.223372036854775807e18:
        return LONG_MAX
    if x <= -9.223372036854775808e18:
        return LONG_MIN
    f = math.floor(x)
    return int(f) + 1 if x - f >= 0.5 else int(f)


def round_half_even(x: float) -> int:
    """Python's `round(x)` for a finite float (ties to even), as the contract converts request
    times to whole nanoseconds. Compiled, this is a few native float operations where
    `round` is a generic call; `x - floor(x)` is exact, so so is the tie test."""
    f = math.floor(x)
    diff = x - f
    if diff > 0.5 or (diff == 0.5 and f % 2 == 1):
        return f + 1
    return f


def saturate_int(x: int) -> int:
    """Clamp a long to the int range, as newer Kafka does for byte-rate throttle times."""
    if x > INT_MAX:
        return INT_MAX
    if x < INT_MIN:
        return INT_MIN
    return x


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay X that brings the rate back to the bound.

    With O the observed rate over a window W and T the bound, O*W/(W+X) = T, so
    X = (O - T)/T * W. Example (ClientQuotaManagerTest#testQuotaViolation): 6300 bytes over a
    10.5 s window is O = 600 B/s against T = 500 B/s, so X = 100/500 * 10500 = 2100 ms.
    A bound of 0 divides to +inf, which `Math.round` saturates to `Long.MAX_VALUE`.
    """
    if bound == 0:
        return LONG_MAX if observed > 0 else 0
    return java_round((observed - bound) / bound * window_ms)


def bounded_throttle_time_ms(observed: float, bound: float, window_ms: int, max_ms: int) -> int:
    """QuotaUtils.boundedThrottleTime: request and connection quotas cap the delay at one window."""
    return min(throttle_time_ms(observed, bound, window_ms), max_ms)


def token_throttle_time_ms(tokens: float, rate: float) -> int:
    """ControllerMutationQuotaManager.throttleTime: time to refill a negative bucket to zero.

    round(-tokens / Q * 1000); with Q = 10/s, -5 tokens give 500 ms and -10 give 1000 ms.
    """
    if rate == 0:
        return LONG_MAX if tokens < 0 else 0
    return java_round(-tokens / rate * 1000)
