"""Writes the self-contained ModelNew file (imports only torch)."""

from kernelwright.emit.module import EmitInfo, emit_fallback, emit_module

__all__ = ["EmitInfo", "emit_fallback", "emit_module"]
