"""What runs a whole launch: the stage list and its loop (`launch`), the stages that read what the
agent left once the unit is destroyed (`after_destroy`), and the `load` command's run against a
URL or a preset served for it (`load_run`). Above the stages and the unit's life (`run`)."""
