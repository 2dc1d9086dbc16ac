package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// errNetworkRefused is what every dial of this process returns when remote bases are not allowed.
var errNetworkRefused = errors.New("network access is refused to builds (remote bases and URLs are not allowed)")

// refuseNetwork makes every HTTP request of the process fail before it dials: kustomize fetches remote files
// with an http.Client on the default transport.
func refuseNetwork() {
	refused := &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errNetworkRefused
		},
	}
	http.DefaultTransport = refused
	http.DefaultClient.Transport = refused
}

// loopbackProxy parses the --remote-proxy URL: plain http on a loopback address (the render's own proxy).
func loopbackProxy(text string) (*url.URL, error) {
	proxy, err := url.Parse(text)
	if err != nil || proxy.Scheme != "http" || proxy.Port() == "" {
		return nil, fmt.Errorf("--remote-proxy %q is not an http://HOST:PORT URL", text)
	}
	if ip := net.ParseIP(proxy.Hostname()); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--remote-proxy %q is not on a loopback address", text)
	}
	return proxy, nil
}

// gitThroughProxy is the environment git runs in when remote bases are allowed: https and http only (no file://
// clone of the operator's own files, no ssh or git:// connection the proxy does not see), every connection through
// the proxy, no configuration but this.
func gitThroughProxy(proxy *url.URL) map[string]string {
	return map[string]string{
		"GIT_ALLOW_PROTOCOL":  "https:http",
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"http_proxy":          proxy.String(),
		"https_proxy":         proxy.String(),
		"HTTPS_PROXY":         proxy.String(),
		"ALL_PROXY":           proxy.String(),
		"all_proxy":           proxy.String(),
		"NO_PROXY":            "",
		"no_proxy":            "",
		"GIT_SSH_COMMAND":     "false",
	}
}

// throughProxy sends every connection of the process, and of the git it starts, through the proxy: kustomize's
// HTTP client asks the proxy for each URL (CONNECT for https), and any other dial is refused.
func throughProxy(proxy *url.URL) error {
	for name, value := range gitThroughProxy(proxy) {
		if err := os.Setenv(name, value); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	transport := &http.Transport{
		Proxy: http.ProxyURL(proxy),
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			if address != proxy.Host {
				return nil, fmt.Errorf("dialing %s: remote bases are fetched through the render's proxy only", address)
			}
			return dialer.DialContext(ctx, network, address)
		},
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	http.DefaultTransport = transport
	http.DefaultClient.Transport = transport
	return nil
}
