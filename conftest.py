"""Shared fixtures. The lab's fixtures (Galera lab, ProxySQL admin double) live in lab/fixtures_*.py;
this file chains them into the product's: redis_server -> personas (viewer/operator/admin users).

Personas and their rights:
  viewer_user    reads every page, changes nothing
  operator_user  also adopts ProxySQL nodes and runs operations
  admin_user     also edits the inventory (Django admin), overrides guards
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

pytest_plugins = ["lab.fixtures_proxysql", "lab.fixtures_galera"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server():
    """A real redis-server (Debian) on a free loopback port for this test run; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run bin/setup")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="redis-test-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start within 10 s")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


def _user_with_role(django_user_model, username, role):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(Group.objects.get(name=role))
    if role == "admin":
        user.is_staff = user.is_superuser = True
        user.save()
    return user


@pytest.fixture
def viewer_user(db, django_user_model):
    return _user_with_role(django_user_model, "vera-viewer", "viewer")


@pytest.fixture
def operator_user(db, django_user_model):
    return _user_with_role(django_user_model, "otto-operator", "operator")


@pytest.fixture
def admin_user_role(db, django_user_model):
    return _user_with_role(django_user_model, "ada-admin", "admin")


@pytest.fixture
def operator_client(client, operator_user):
    client.force_login(operator_user)
    return client


@pytest.fixture
def viewer_client(client, viewer_user):
    client.force_login(viewer_user)
    return client
