"""The package-source parsers of repo.nvidia: one-line .list, deb822 .sources, .repo files, Signed-By conflicts."""

from __future__ import annotations

from nvdeploy.actions.sources import Source, apt_sources, conflicts, dnf_sources, split_files

NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
GREP = (
    "/etc/apt/sources.list:deb http://archive.ubuntu.com/ubuntu jammy main restricted\n"
    "/etc/apt/sources.list:# deb-src http://archive.ubuntu.com/ubuntu jammy main\n"
    f"/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list:deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg]"
    f" {NVIDIA} /\n"
    "/etc/apt/sources.list.d/nvidia-container-toolkit.list:deb [signed-by=/usr/share/keyrings/nvidia-container-"
    "toolkit-keyring.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Types: deb\n"
    "/etc/apt/sources.list.d/ubuntu.sources:URIs: http://archive.ubuntu.com/ubuntu/\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Suites: noble noble-updates\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Components: main\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
    "/etc/apt/sources.list.d/ubuntu.sources:\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Types: deb\n"
    "/etc/apt/sources.list.d/ubuntu.sources:URIs: http://security.ubuntu.com/ubuntu/\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Suites: noble-security\n"
    "/etc/apt/sources.list.d/ubuntu.sources:Enabled: no\n"
)


def test_list_and_deb822_entries_in_apts_order():
    sources = apt_sources(split_files(GREP))
    assert sources[0] == Source("/etc/apt/sources.list", "http://archive.ubuntu.com/ubuntu", "jammy", "")
    cuda = [s for s in sources if s.points_at(NVIDIA.rstrip("/"))]
    assert cuda == [Source("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list", NVIDIA, "/",
                           "/usr/share/keyrings/cuda-archive-keyring.gpg")]
    deb822 = [s for s in sources if s.path.endswith(".sources")]
    assert [(s.suite, s.signed_by) for s in deb822] == [
        ("noble", "/usr/share/keyrings/ubuntu-archive-keyring.gpg"),
        ("noble-updates", "/usr/share/keyrings/ubuntu-archive-keyring.gpg")]  # the disabled stanza is left out
    assert conflicts(sources, NVIDIA) == []


def test_the_same_url_with_two_keys_is_a_conflict_and_without_signed_by_too():
    text = GREP + (f"/etc/apt/sources.list.d/nvdeploy-nvidia.list:deb [signed-by=/usr/share/keyrings/nvdeploy-cuda-"
                   f"archive-keyring.gpg] {NVIDIA} /\n")
    clash = conflicts(apt_sources(split_files(text)), NVIDIA)
    assert [s.path for s in clash] == ["/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list",
                                       "/etc/apt/sources.list.d/nvdeploy-nvidia.list"]
    plain = GREP + f"/etc/apt/sources.list.d/cuda.list:deb {NVIDIA.rstrip('/')} /\n"  # add-apt-repository's style
    assert len(conflicts(apt_sources(split_files(plain)), NVIDIA)) == 2


def test_a_deb822_file_for_the_cuda_repository_is_found():
    text = ("/etc/apt/sources.list.d/cuda.sources:Types: deb\n"
            f"/etc/apt/sources.list.d/cuda.sources:URIs: {NVIDIA}\n"
            "/etc/apt/sources.list.d/cuda.sources:Suites: /\n"
            "/etc/apt/sources.list.d/cuda.sources:Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg\n")
    assert [s.path for s in apt_sources(split_files(text)) if s.points_at(NVIDIA)] == [
        "/etc/apt/sources.list.d/cuda.sources"]


def test_dnf_repo_files_baseurl_with_or_without_the_trailing_slash():
    text = ("/etc/yum.repos.d/cuda-rhel9.repo:[cuda-rhel9-x86_64]\n"
            "/etc/yum.repos.d/cuda-rhel9.repo:baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/"
            "x86_64\n"
            "/etc/yum.repos.d/rocky.repo:baseurl=http://dl.rockylinux.org/$contentdir/$releasever/BaseOS/$basearch/os/\n"
            "/etc/yum.repos.d/notes.txt:baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64\n")
    found = [s for s in dnf_sources(split_files(text))
             if s.points_at("https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/")]
    assert [s.path for s in found] == ["/etc/yum.repos.d/cuda-rhel9.repo"]


def test_odd_lines_are_ignored_never_raise():
    assert split_files("no colon here\nrelative:path\n:\n") == {}
    assert apt_sources({"/etc/apt/sources.list.d/x.list": ["deb", "deb [", "garbage"]}) == []
    assert apt_sources({"/etc/apt/sources.list.d/x.sources": ["URIs", ": ", " continuation"]}) == []
