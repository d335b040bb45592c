"""Every `farm` command refuses an option of one value given twice (`--config a --config b`,
`--run 5 ... --run 6`, `--log x --log y`): click keeps the last and drops the first unsaid, so a
wrapper's appended `--config` ran another farm's configuration, and a cron line's first `--log`
got nothing (red-team 225). Repeatable options (`--node`) and flags (`--all --all`) stay as they are."""

from __future__ import annotations

import click


def _once(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag)


class OnceCommand(click.Command):
    """A command whose options of one value may each be given once."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            # the parser's own reading, in order (a repeated option once per time it was given);
            # its errors are the real parse's too, raised here first
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            seen: set[str | None] = set()
            for param in order:
                if _once(param) and param.name in seen:
                    names = " / ".join(param.opts)
                    raise click.UsageError(
                        f"{names} given twice; give it once (the farm would use the last alone)", ctx
                    )
                seen.add(param.name)
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    """`farm`: its commands are OnceCommands."""

    command_class = OnceCommand
