"""A stand-in for tc: the enforcer's and the agent's tests without root."""

from __future__ import annotations

from operators.agent.htb import BandwidthError


class FakeTc:
    """Records tc commands; answers `show` queries from canned output."""

    def __init__(self, class_show: str = "", qdisc_show: str = "[]") -> None:
        self.calls: list[list[str]] = []
        self.class_show = class_show
        self.qdisc_show = qdisc_show
        self.fail_on: str | None = None

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(argv)
        if self.fail_on is not None and self.fail_on in argv:
            raise BandwidthError("tc: Error: boom")
        if "show" in argv:
            return self.class_show if "class" in argv else self.qdisc_show
        return ""

    def verbs(self) -> list[str]:
        """Each mutating call as "object verb", e.g. "class change"."""
        out = []
        for argv in self.calls:
            args = argv[1:]
            if args[:1] == ["-netns"]:
                args = args[2:]
            if "show" not in args:
                out.append(f"{args[0]} {args[1]}")
        return out
