"""verifiers' `verifiers.envs.experimental`, as a place only: vfrl has none of its modules. Being a package, a
classic environment's import of one of them fails naming that module, and the loader says in one line which need
a service vfrl does not run (loader.HOSTED: Prime Intellect's remote sandboxes)."""
