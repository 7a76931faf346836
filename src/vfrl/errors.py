"""verifiers' `verifiers.errors`: the errors an environment raises to end a rollout, not the run.

A `vfrl.Error` (any of these) raised by a multi-turn environment's `env_response` (a tool that failed, a sandbox
that broke) ends that rollout with its turns so far and the error in `Rollout.error`, as verifiers records it in
`state["error"]`; any other exception stops the run, as there.
"""


class Error(Exception):
    """The base of the errors an environment raises to end a rollout."""


class ModelError(Error):
    pass


class InvalidModelResponseError(ModelError):
    pass


class EmptyModelResponseError(InvalidModelResponseError):
    pass


class OverlongPromptError(Error):
    pass


class ToolError(Error):
    pass


class ToolParseError(ToolError):
    pass


class ToolCallError(ToolError):
    pass


class InfraError(Error):
    pass


class TunnelError(InfraError):
    pass


class SandboxError(InfraError):
    pass


class BrowserSandboxError(SandboxError):
    pass


__all__ = ["Error", "ModelError", "InvalidModelResponseError", "EmptyModelResponseError", "OverlongPromptError",
           "ToolError", "ToolParseError", "ToolCallError", "InfraError", "TunnelError", "SandboxError",
           "BrowserSandboxError"]
