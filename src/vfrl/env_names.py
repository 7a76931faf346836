"""The names vfrl.envs exports (its __all__), listed apart from it so that `import vfrl` names them without importing
the environment library (openai and the rest): vfrl/__init__.py loads each on first use."""

ENVIRONMENT_NAMES = [
    "Environment", "Rollout", "SingleTurnEnv", "MultiTurnEnv", "ToolEnv", "StatefulToolEnv", "EnvGroup",
    "Rubric", "RubricGroup", "JudgeRubric", "MathRubric", "extract_boxed_answer",
    "Parser", "XMLParser", "ThinkParser", "MaybeThinkParser", "load_environment",
    # verifiers' classic API names, so that a package ports by `import vfrl as vf` (docs/environments.md)
    "stop", "cleanup", "teardown", "Tool", "State", "Messages", "Message", "SystemMessage", "UserMessage",
    "AssistantMessage", "ToolMessage", "ToolCall", "DatasetBuildError", "load_example_dataset", "extract_hash_answer",
    "BOXED_SYSTEM_PROMPT", "THINK_BOXED_SYSTEM_PROMPT", "ReasoningGymEnv", "TextArenaEnv", "PythonEnv", "SandboxEnv",
    "BrowserEnv",
]
