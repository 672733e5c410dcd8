import time
from test_fault_matrix_azure import *  # noqa
from test_fault_matrix_azure import azure, quick_trajectory, launch_with  # noqa

def test_orphan(project, azure, tmp_path):
    azure.behaviour.trajectory = quick_trajectory(tmp_path / "hello-stall.yaml", stall_mission_s=120)
    code, out, err, tree = launch_with(project, "run:sigkill@2")
    for i in range(4):
        print(i, tree.alive(timeout_s=0))
        time.sleep(2)
    print(sorted(tree.seen))
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=120)
    print(tree.alive(timeout_s=0))
    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=120)
