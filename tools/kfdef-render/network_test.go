package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoopbackProxy(t *testing.T) {
	for text, ok := range map[string]bool{"http://127.0.0.1:3128": true, "http://[::1]:3128": true,
		"http://10.0.0.1:3128": false, "https://127.0.0.1:3128": false, "http://127.0.0.1": false,
		"http://proxy.example:3128": false, "127.0.0.1:3128": false} {
		if _, err := loopbackProxy(text); (err == nil) != ok {
			t.Errorf("loopbackProxy(%q) = %v", text, err)
		}
	}
}

// With remote bases allowed, kustomize's HTTP client asks the proxy for every URL and dials nothing else.
func TestEveryRequestGoesThroughTheProxy(t *testing.T) {
	defaultTransport := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport, http.DefaultClient.Transport = defaultTransport, nil })
	proxy, _ := url.Parse("http://127.0.0.1:1")
	for name := range gitThroughProxy(proxy) {
		t.Setenv(name, "") // restored after the test
	}
	if err := throughProxy(proxy); err != nil {
		t.Fatal(err)
	}
	transport := http.DefaultTransport.(*http.Transport)
	request, _ := http.NewRequest("GET", "https://example.com/base.yaml", nil)
	if via, err := transport.Proxy(request); err != nil || via.String() != proxy.String() {
		t.Errorf("a request goes via %v (%v)", via, err)
	}
	if _, err := transport.DialContext(context.Background(), "tcp", "93.184.215.14:443"); err == nil ||
		!strings.Contains(err.Error(), "through the render's proxy only") {
		t.Errorf("a direct dial: %v", err)
	}
}

// git in the environment the helper gives it refuses a file:// clone (the operator's own disk) and ssh.
func TestGitClonesNothingButHTTPS(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is not installed:", err)
	}
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q", repo}, {"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t",
		"commit", "-q", "--allow-empty", "-m", "private"}} {
		if out, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	proxy, _ := url.Parse("http://127.0.0.1:1")
	environment := os.Environ()
	for name, value := range gitThroughProxy(proxy) {
		environment = append(environment, name+"="+value)
	}
	for _, source := range []string{"file://" + repo, repo, "ssh://git@127.0.0.1/r.git", "git://127.0.0.1/r.git"} {
		clone := exec.Command(git, "clone", "-q", source, filepath.Join(t.TempDir(), "c"))
		clone.Env = environment
		out, err := clone.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "transport '") || !strings.Contains(string(out), "not allowed") {
			t.Errorf("git clone %s: %v\n%s", source, err, out)
		}
	}
}
