"""Math answers: the last `\\boxed{...}` of a reply, compared with the reference exactly, then as numbers,
then (when sympy is installed) as symbolic expressions.

`\\frac{1}{2}`, `1/2`, `0.5` and `0.50` are all the same number; `2\\sqrt{2}` equals `\\sqrt{8}`
and `x+1` equals `1+x` through sympy. Without sympy, the exact and numeric checks still run.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from vfrl.envs.rubric import Rubric

_BOX_OPENERS = ("\\boxed{", "\\fbox{")


def boxed_content(text: str) -> str | None:
    """Content of the last `\\boxed{...}` or `\\fbox{...}` (nested braces kept); None when there is none."""
    start = max(text.rfind(opener) + len(opener) if opener in text else -1 for opener in _BOX_OPENERS)
    if start < 0:
        return None
    depth = 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    return None  # unclosed box: nothing was boxed


def extract_boxed_answer(text: str, strict: bool = False) -> str:
    """Content of the last `\\boxed{...}`, or `text` itself when nothing is boxed (as in verifiers);
    `strict=True`: "" when nothing is boxed."""
    content = boxed_content(text)
    return ("" if strict else text) if content is None else content


def _boxed_or_empty(text: str) -> str:
    return extract_boxed_answer(text, strict=True)


_LATEX_NOISE = [r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\displaystyle", "$"]


def normalize_answer(answer: str) -> str:
    """Strip the spelling that does not change the value: spaces, `$`, `\\text{}`, `\\dfrac`, 1,000 separators."""
    s = str(answer).strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    for noise in _LATEX_NOISE:
        s = s.replace(noise, "")
    s = s.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac").replace("^\\circ", "").replace("^{\\circ}", "")
    s = re.sub(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d])", lambda m: m.group(1) + m.group(2).replace(",", ""), s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    return s


_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$")


def as_number(answer: str) -> float | None:
    """`42`, `-3.5`, `7/2`, `\\frac{7}{2}`, `1e3` as a float; None when it is not a plain number."""
    s = normalize_answer(answer)
    if m := _FRAC.match(s):
        sign, num, den = m.groups()
        s = f"{sign}{num}/{den}"
    try:
        return float(Fraction(s)) if "/" in s else float(s)
    except (ValueError, ZeroDivisionError):
        return None


# Only these words may reach sympy's parser (it evaluates Python): numbers, operators, single-letter
# variables and a few functions. Huge powers are refused so a reply cannot make the scorer hang.
_SYMPY_WORDS = {"sqrt", "pi", "sin", "cos", "tan", "log", "exp"}
_SAFE_CHARS = re.compile(r"^[\w+\-*/^().\s]*$")
_SMALL_POWER = re.compile(r"\^(\(-?\d{1,3}(/\d{1,3})?\)|-?\d{1,3}|[a-z])(?![\w(.])")


def _to_sympy_text(s: str) -> str | None:
    s = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
    s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
    s = s.replace(r"\cdot", "*").replace(r"\times", "*").replace(r"\pi", "pi").replace("{", "(").replace("}", ")")
    s = re.sub(r"\\(sin|cos|tan|log|exp)", r"\1", s)
    s = s.replace("**", "^")
    if len(s) > 100 or "\\" in s or "_" in s or not _SAFE_CHARS.match(s) or re.search(r"\.(?!\d)", s):
        return None
    if s.count("^") > 1 or ("^" in s and not _SMALL_POWER.search(s)):
        return None
    if any(len(w) > 1 and w not in _SYMPY_WORDS for w in re.findall(r"[A-Za-z]+", s)):
        return None
    return s.replace("^", "**")


def symbolically_equal(given: str, expected: str) -> bool:
    try:
        import sympy
        from sympy.parsing.sympy_parser import implicit_multiplication_application, parse_expr, standard_transformations
    except ImportError:
        return False
    texts = [_to_sympy_text(normalize_answer(x)) for x in (given, expected)]
    if None in texts:
        return False
    try:
        transformations = standard_transformations + (implicit_multiplication_application,)
        a, b = (parse_expr(t, transformations=transformations, evaluate=True) for t in texts)
        return bool(sympy.simplify(a - b) == 0)
    except Exception:  # anything sympy cannot read is simply not equal
        return False


def answers_equal(given: str, expected: str, rel_tol: float = 1e-6) -> bool:
    """Exact (after normalizing), then numeric (relative tolerance), then symbolic."""
    if normalize_answer(given) == normalize_answer(expected):
        return True
    a, b = as_number(given), as_number(expected)
    if a is not None and b is not None:
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12)
    return symbolically_equal(given, expected)


class MathRubric(Rubric):
    """Reward 1.0 when the last `\\boxed{}` of the reply (after its `</think>`, if any) equals the answer
    (exactly, numerically or symbolically), else 0.0. With a `parser`, its `parse_answer(completion)` picks the
    answer instead."""

    def __init__(self, funcs: list | None = None, weights: list[float] | None = None, parser=None):
        from vfrl.envs.parsers import MaybeThinkParser

        # the default reads the last box after any reasoning, as verifiers' does; an env built with
        # `parser=rubric.parser` (verifiers' gsm8k) then parses answers the same way
        super().__init__(funcs, weights,
                         parser=parser if parser is not None else MaybeThinkParser(_boxed_or_empty))
        self.add_reward_func(self.correct_answer_reward_func)

    @staticmethod
    def correct_answer_reward_func(completion: Any, answer: str, parser=None) -> float:
        if parser is not None:
            given = parser.parse_answer(completion)
        else:
            given = boxed_content(_last_assistant_text(completion))
        if given is None or not str(given).strip():
            return 0.0
        return 1.0 if answers_equal(str(given), str(answer)) else 0.0


def _last_assistant_text(completion: Any) -> str:
    from vfrl.envs.parsers import assistant_texts

    texts = assistant_texts(completion or [])
    return texts[-1] if texts else ""
