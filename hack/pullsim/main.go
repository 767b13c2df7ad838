// Command pullsim is the image cache of the local control plane's simulated node: kwok runs no container
// runtime, so this gives an image whose tag ends in "-slow-pull" a pull time on a node that has not
// pulled it yet.
//
// For each pod scheduled on a node with such an image, it writes on the pod the time its pull ends
// (annotation pull.kwok.gluesync.test/ready-at), which kwok's stages (hack/controlplane/stages.yaml) wait
// for: now plus the pull time (GKO_SLOW_PULL_SECONDS, default 20) when the node has not pulled the image,
// the end of that pull when one is under way, and now once it is done. What each node has pulled (and
// when each pull ends) is kept on the Node, in the annotation pull.kwok.gluesync.test/images (a JSON object,
// image -> RFC 3339 time), so that it outlives this process and a test can make a node forget an image by
// removing its key.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

const (
	suffix       = "-slow-pull"
	readyAt      = "pull.kwok.gluesync.test/ready-at"
	nodeImages   = "pull.kwok.gluesync.test/images"
	defaultPullS = 20
)

func slowImages(pod *corev1.Pod) []string {
	var out []string
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if strings.HasSuffix(c.Image, suffix) {
			out = append(out, c.Image)
		}
	}
	return out
}

type puller struct {
	client kubernetes.Interface
	pull   time.Duration
}

// pulled records on the node the end of each image's pull (starting the ones it has not pulled) and
// answers when the last of them ends.
func (p *puller) pulled(ctx context.Context, node string, images []string) (time.Time, error) {
	var last time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := p.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		known := map[string]string{}
		if raw := n.Annotations[nodeImages]; raw != "" {
			_ = json.Unmarshal([]byte(raw), &known)
		}
		now := time.Now().UTC()
		last = now
		changed := false
		for _, image := range images {
			end, err := time.Parse(time.RFC3339Nano, known[image])
			if err != nil {
				end = now.Add(p.pull)
				known[image] = end.Format(time.RFC3339Nano)
				changed = true
				log.Printf("node %s pulls %s until %s", node, image, known[image])
			}
			if end.After(last) {
				last = end
			}
		}
		if !changed {
			return nil
		}
		raw, _ := json.Marshal(known)
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[nodeImages] = string(raw)
		_, err = p.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	return last, err
}

func (p *puller) handle(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Annotations[readyAt] != "" {
		return
	}
	images := slowImages(pod)
	if len(images) == 0 {
		return
	}
	end, err := p.pulled(ctx, pod.Spec.NodeName, images)
	if err != nil {
		log.Printf("node %s: %v", pod.Spec.NodeName, err)
		return
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{readyAt: end.Format(time.RFC3339Nano)}},
	})
	_, err = p.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		log.Printf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	config.QPS, config.Burst = 100, 200
	client := kubernetes.NewForConfigOrDie(config)
	pull := defaultPullS * time.Second
	if s, err := strconv.ParseFloat(os.Getenv("GKO_SLOW_PULL_SECONDS"), 64); err == nil {
		pull = time.Duration(s * float64(time.Second))
	}
	p := &puller{client: client, pull: pull}
	ctx := context.Background()
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	pods := factory.Core().V1().Pods().Informer()
	queue := make(chan *corev1.Pod, 4096)
	on := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" && pod.Annotations[readyAt] == "" && len(slowImages(pod)) > 0 {
			queue <- pod
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    on,
		UpdateFunc: func(_, obj any) { on(obj) },
	})
	factory.Start(ctx.Done())
	log.Printf("pulling images ending in %q in %s on a node that has not pulled them", suffix, pull)
	for pod := range queue {
		p.handle(ctx, pod)
	}
}
