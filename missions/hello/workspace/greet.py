print("hello from the workspace")
