"""TEMPORARY: count tenant-id validations on submit's success path (not committed)."""
import sys
from collections import Counter

from tests.admission.helpers import LAYOUT


def test_count(redis_db, uploaded, new_tenant):
    from imposition.common import tenancy
    from tasks.submission import submit_job

    tenant = new_tenant()
    key = uploaded(tenant)
    submit_job(tenant_id=tenant, token="warm", input_key=key, layout=LAYOUT)  # caches warm
    code = tenancy.validate_tenant_id.__code__
    where = Counter()

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is code:
            caller = frame.f_back
            where[f"{caller.f_code.co_filename.split('/door/')[-1]}:{caller.f_code.co_name}:{caller.f_lineno}"] += 1

    sys.setprofile(prof)
    try:
        submit_job(tenant_id=tenant, token="counted", input_key=key, layout=LAYOUT)
    finally:
        sys.setprofile(None)
    with open("/tmp/door/count.txt", "w") as f:
        f.write(f"total {sum(where.values())}\n")
        for k, v in sorted(where.items()):
            f.write(f"{v} {k}\n")
