"""What verifiers' later classic releases (0.1.10 - 0.3) added, as the community's packages use it
(prime-environments' 109 packages, docs/environments.md): tools as `tool_defs`, `state["final_env_response"]`,
`@vf.cleanup`, the environment's keywords, its own modules beside it, against a fake vLLM (tests/fake_openai.py).
The real run: test_env_classic_api.py's classic_calc_late."""

import asyncio
import itertools
import textwrap
from types import SimpleNamespace

import pytest
from fake_openai import FakeOpenAI

import vfrl as vf
from vfrl.envs.loader import EnvironmentLoadError
from vfrl.verifiers_compat import companions

SAMPLING = {"temperature": 1.0, "max_tokens": 200}
ROWS = [{"question": "q0"}, {"question": "q1", "info": {"tool_defs": [{"name": "from_row", "description": "r",
                                                                        "parameters": {"type": "object"}}]}},
        {"question": "q2", "info": {"tool_defs": []}}]


def rollout(env, client, row=0):
    return asyncio.run(env.rollout_with_state(client, "m", env.dataset[row], row, dict(SAMPLING)))


def tools_sent(client) -> list:
    return [[t["function"]["name"] for t in body["tools"] or []] for _, body in client.calls]


class OneTurn(vf.MultiTurnEnv):
    def __init__(self, **kwargs):
        super().__init__(max_turns=1, **kwargs)


def test_a_rollout_offers_its_rows_tool_defs_else_the_environments_and_setup_state_may_replace_them():
    env = OneTurn(dataset=ROWS, tool_defs=[vf.Tool(name="from_env", description="e",
                                                   parameters={"type": "object", "properties": {}})])
    client = FakeOpenAI(["a"] * 3, tool_parser=True)
    for row in range(3):
        rollout(env, client, row)
    assert tools_sent(client) == [["from_env"], ["from_row"], []]
    assert client.calls[0][1]["tools"][0] == {"type": "function", "function": {
        "name": "from_env", "description": "e", "parameters": {"type": "object", "properties": {}}}}

    class PerTask(OneTurn):
        async def setup_state(self, state):
            state["tool_defs"] = [vf.Tool(name=f"for_{state['prompt'][-1]['content']}", description="")]
            return state

    client = FakeOpenAI(["a"] * 2, tool_parser=True)
    rollout(PerTask(dataset=ROWS), client, 0)
    rollout(PerTask(dataset=ROWS), client, 2)
    assert tools_sent(client) == [["for_q0"], ["for_q2"]]

    def lookup(city: str) -> str:
        """Look up a city."""
        return city

    tool_env = vf.ToolEnv(dataset=ROWS[:1], tools=[lookup])
    assert tool_env.oai_tools == [vf.Tool.of(lookup).openai()]
    tool_env.oai_tools = [{"type": "function", "function": {"name": "set_by_name", "parameters": {}}}]
    client = FakeOpenAI(["a"], tool_parser=True)
    rollout(tool_env, client, 0)  # setting the older name sets what is sent, as it did before tool_defs
    assert tools_sent(client) == [["set_by_name"]]

    class Unlocks(vf.MultiTurnEnv):  # each request offers what state["tool_defs"] holds then, as in verifiers
        async def env_response(self, messages, state):
            state["tool_defs"] = [*state["tool_defs"], vf.Tool(name=f"unlocked_{state['turn']}")]
            return [vf.UserMessage(content="go on")]

    client = FakeOpenAI(["a"] * 3, tool_parser=True)
    rollout(Unlocks(dataset=ROWS, max_turns=3), client, 2)
    assert tools_sent(client) == [[], ["unlocked_1"], ["unlocked_1", "unlocked_2"]]


def test_a_tool_definition_reads_the_same_in_every_shape_a_package_writes_it():
    def lookup(city: str, days: int = 1) -> str:
        """Look up the weather.

        Args:
            city: Where.
        """
        return city

    from vfrl.utils.tool_utils import convert_func_to_tool_def

    tool = convert_func_to_tool_def(lookup)
    assert tool.parameters["required"] == ["city"] and tool.description == "Look up the weather."
    fields = tool.model_dump()
    shapes = [tool, dict(fields), {"type": "function", "function": dict(fields)}, SimpleNamespace(**fields), lookup,
              {k: v for k, v in fields.items() if k != "strict"}]
    for a, b in itertools.combinations(shapes, 2):
        assert vf.Tool.of(a).openai() == vf.Tool.of(b).openai()
    assert tool["name"] == tool.get("name") == "lookup" and "strict" not in tool.openai()["function"]
    with pytest.raises(ValueError, match="needs a name"):
        vf.Tool.of({"description": "nameless"})


def test_final_env_response_ends_the_rollout_with_its_messages():
    class Ends(vf.MultiTurnEnv):
        async def env_response(self, messages, state):
            state["final_env_response"] = [vf.UserMessage(content="game over")]
            return [vf.UserMessage(content="never sent")]

    client = FakeOpenAI(["move"])
    r, state = rollout(Ends(dataset=ROWS), client)
    assert [m["content"] for m in r.completion] == ["move", "game over"] and len(client.calls) == 1

    class EndsQuietly(Ends):
        async def env_response(self, messages, state):
            state["final_env_response"] = []
            return []

    r, _ = rollout(EndsQuietly(dataset=ROWS), FakeOpenAI(["move"]))
    assert [m["content"] for m in r.completion] == ["move"]


def test_cleanup_runs_when_a_rollout_ends_however_it_ends_before_scoring():
    seen = []

    class Cleans(vf.MultiTurnEnv):
        async def env_response(self, messages, state):
            if state["info"].get("fail"):
                raise RuntimeError("the environment broke")
            return [vf.UserMessage(content="again")]

        async def setup_state(self, state):
            return {**state, "set_up": True}  # a new state: the one cleanup and the rubric get

        @vf.cleanup(priority=1)
        async def first(self, state):
            seen.append(("first", state["turn"]))
            state["cleaned"] = state["set_up"]

        @vf.cleanup
        def second(self, env, state):  # sync, named arguments
            seen.append(("second", env is self))

    rubric = vf.Rubric(funcs=[lambda state: float(state.get("cleaned", False))])
    env = Cleans(dataset=[{"question": "q"}, {"question": "q", "info": {"fail": True}}], max_turns=2, rubric=rubric)
    scored = asyncio.run(env.run_group(FakeOpenAI(["a", "b"]), "m", 0, 1, dict(SAMPLING), asyncio.Semaphore(1)))
    assert seen == [("first", 2), ("second", True)] and scored[0].reward == 1.0
    with pytest.raises(RuntimeError, match="broke"):
        rollout(env, FakeOpenAI(["a"]), 1)
    assert seen[2:] == [("first", 1), ("second", True)]


def test_the_keywords_of_verifiers_later_environments_are_taken_and_others_kept_as_attributes():
    env = vf.SingleTurnEnv(dataset=ROWS, max_workers=8, env_args={"k": 1}, map_kwargs={"num_proc": 2},
                           max_seq_len=512, pass_threshold=0.8, tool_defs=None, max_concurrent=10)
    assert (env.max_workers, env.env_args, env.max_seq_len, env.pass_threshold) == (8, {"k": 1}, 512, 0.8)
    assert env.max_concurrent == 10  # verifiers sets the keywords it does not know as attributes (unscramble)


def package(folder, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


SCORING = """
    from verifiers.parsers.parser import Parser
    from verifiers.types import Messages

    def rubric():
        import verifiers as vf
        return vf.Rubric(funcs=[lambda completion: 1.0], parser=Parser())
"""
ENV = """
    import verifiers as vf
    from {scoring} import rubric

    def load_environment():
        return vf.SingleTurnEnv(dataset=[{{"question": "q"}}], rubric=rubric())
"""


def test_the_modules_a_classic_package_ships_beside_it_read_as_vfrl_from_its_folder_or_its_distribution(
        tmp_path, monkeypatch):
    # a source folder on the path (a checkout, an editable install): its other modules
    package(tmp_path / "src", {"late_env.py": ENV.format(scoring="late_scoring"), "late_scoring/__init__.py": SCORING,
                               "notes/readme.txt": ""})
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    assert companions("late_env") == ["late_scoring"]
    assert isinstance(vf.load_environment("late_env").rubric.parser, vf.Parser)

    # installed: the other top-level modules its distribution's RECORD lists, not the install folder's others
    site = tmp_path / "site-packages"
    package(site, {"wheel_env.py": ENV.format(scoring="wheel_scoring"), "wheel_scoring/__init__.py": SCORING,
                   "someone_else.py": "import verifiers as vf\n",
                   "wheel_env-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: wheel-env\nVersion: 0.1\n",
                   "wheel_env-0.1.dist-info/RECORD": "wheel_env.py,,\nwheel_scoring/__init__.py,,\n"})
    monkeypatch.syspath_prepend(str(site))
    assert companions("wheel_env") == ["wheel_scoring"]
    assert vf.load_environment("wheel_env").dataset[0]["question"] == "q"


def test_a_library_asking_verifiers_for_its_classic_api_is_named_in_one_line(tmp_path, monkeypatch):
    """The environment imports a library (not its own) that builds a classic environment with the installed
    verifiers 0.4, as korrel's exporter does: the line names the library's line and the change to make."""
    package(tmp_path / "site-packages", {"scenario_lib.py": """
        def to_env():
            import verifiers as vf
            return vf.SingleTurnEnv(dataset=[{"question": "q"}])
    """})
    package(tmp_path / "src", {"lib_env.py": """
        import verifiers as vf
        from scenario_lib import to_env

        def load_environment():
            return to_env()
    """})
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    with pytest.raises(EnvironmentLoadError) as e:
        vf.load_environment("lib_env")
    from importlib.metadata import version

    assert str(e.value) == (
        f"environment 'lib_env': scenario_lib.py:4 asks for verifiers.SingleTurnEnv, verifiers' classic API (<= 0.3), "
        f"which the installed verifiers {version('verifiers')} does not have; vfrl runs the classic API with its own "
        "classes in the environment's own modules, not in other packages: change that module's `import verifiers "
        "as vf` to `import vfrl as vf` (docs/environments.md, 'Porting from verifiers')")
    assert "\n" not in str(e.value)
