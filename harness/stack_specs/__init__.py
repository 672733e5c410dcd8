"""What each stack declares about itself (name, port, `config:` schema, preset overrides): data
that imports neither `harness.vot` nor a stack module, so the schema (`harness.vot`) and the
stacks (`harness.stacks`, which import `harness.vot`) both read it and neither imports the other's
package back."""
